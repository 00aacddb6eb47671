# One image for the web server, the Celery workers and the GPU evaluator.
# CUDA base so the `gpu` worker can build and run CUDA kernels (nvcc for load_inline);
# web and CPU-only workers run the same image without a GPU.
ARG CUDA_IMAGE=nvidia/cuda:12.8.1-devel-ubuntu24.04
FROM ${CUDA_IMAGE}

ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH

RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv python3-dev build-essential ninja-build git \
 && rm -rf /var/lib/apt/lists/* \
 && python3 -m venv /opt/venv

WORKDIR /app
# torch first, pinned to a CUDA build (a bare `pip install torch` may pick another one)
ARG TORCH_INDEX=https://download.pytorch.org/whl/cu128
RUN pip install --upgrade pip && pip install --index-url ${TORCH_INDEX} "torch==2.13.0"
COPY pyproject.toml README.md* ./
COPY webapp ./webapp
COPY gpu_workers ./gpu_workers
COPY agent ./agent
COPY training ./training
COPY manage.py ./
RUN pip install -e ".[ray]" \
 && DJANGO_SETTINGS_MODULE=webapp.settings.base SECRET_KEY=build python manage.py collectstatic --noinput

RUN useradd --create-home --uid 1000 arena && mkdir -p /app/var && chown -R arena /app/var
USER arena
ENV DJANGO_SETTINGS_MODULE=webapp.settings.base \
    TORCH_EXTENSIONS_DIR=/app/var/torch_extensions
EXPOSE 8000
CMD ["daphne", "-b", "0.0.0.0", "-p", "8000", "webapp.asgi:application"]
