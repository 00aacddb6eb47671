"""Reference CUDA kernel for arena/attention_head: q/k/v projections and the two batched products as tiled fp32
GEMMs, a block-per-row softmax between them."""

import math

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime.h>

#define ARENA_CHECK_INPUT(t, what)                                                       \
    TORCH_CHECK((t).is_cuda(), what ": tensors must be CUDA tensors");                   \
    TORCH_CHECK((t).scalar_type() == torch::kFloat32, what ": tensors must be float32")

#define ARENA_CHECK_LAUNCH(what)                                                         \
    do {                                                                                 \
        cudaError_t err_ = cudaGetLastError();                                           \
        TORCH_CHECK(err_ == cudaSuccess, what ": kernel launch failed: ", cudaGetErrorString(err_)); \
    } while (0)

// A grid of at most this many blocks covers any size through grid-stride loops.
static inline unsigned int arena_grid(int64_t work, int threads) {
    const int64_t blocks = (work + threads - 1) / threads;
    return static_cast<unsigned int>(std::max<int64_t>(1, std::min<int64_t>(blocks, 65535LL * 8)));
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

// Block-wide sum / max (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// The order of the additions is fixed, so the result is deterministic. `scratch` holds 32 floats.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();  // scratch may still be read by a previous reduction
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    return warp_sum(lane < warps ? scratch[lane] : 0.0f);
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    return warp_max(lane < warps ? scratch[lane] : -INFINITY);
}

// Tiled fp32 GEMM with fp32 accumulation (FMA, no tensor cores):
//   C[z] (M x N) = epilogue(alpha * A[z] (M x K) @ op(B[z]) + bias),  z = blockIdx.z (batch)
// op(B) = B^T when B_NK (B stored N x K, like nn.Linear's weight), else B (stored K x N).
// A 64 x 64 tile of C per block of 256 threads, 4 x 4 outputs per thread, K in steps of 16 through
// shared memory; every global index is bounds-checked (zero fill), so any M, N, K works.
constexpr int GEMM_BM = 64, GEMM_BN = 64, GEMM_BK = 16, GEMM_THREADS = 256;
enum GemmEpilogue { EPI_NONE = 0, EPI_RELU = 1, EPI_GELU = 2 };

template <bool B_NK, int EPI>
__global__ void __launch_bounds__(GEMM_THREADS) gemm_kernel(
    const float* __restrict__ A, const float* __restrict__ B, const float* __restrict__ bias,
    const float* __restrict__ residual, float* __restrict__ C, int M, int N, int K,
    long long stride_a, long long stride_b, long long stride_c, float alpha) {
    __shared__ float As[GEMM_BK][GEMM_BM + 4];
    __shared__ float Bs[GEMM_BK][GEMM_BN + 4];
    const long long z = blockIdx.z;
    A += z * stride_a;
    B += z * stride_b;
    C += z * stride_c;
    if (residual != nullptr) residual += z * stride_c;
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int row0 = blockIdx.y * GEMM_BM, col0 = blockIdx.x * GEMM_BN;
    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;

    for (int k0 = 0; k0 < K; k0 += GEMM_BK) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {  // A tile, 64 x 16: consecutive threads read consecutive k
            const int idx = tid + i * GEMM_THREADS, r = idx / GEMM_BK, kk = idx % GEMM_BK;
            const int gr = row0 + r, gk = k0 + kk;
            As[kk][r] = (gr < M && gk < K) ? A[(long long)gr * K + gk] : 0.0f;
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int idx = tid + i * GEMM_THREADS;
            if (B_NK) {  // 64 (n) x 16 (k) values of B, consecutive threads read consecutive k
                const int c = idx / GEMM_BK, kk = idx % GEMM_BK, gc = col0 + c, gk = k0 + kk;
                Bs[kk][c] = (gc < N && gk < K) ? B[(long long)gc * K + gk] : 0.0f;
            } else {  // 16 (k) x 64 (n) values of B, consecutive threads read consecutive n
                const int kk = idx / GEMM_BN, c = idx % GEMM_BN, gc = col0 + c, gk = k0 + kk;
                Bs[kk][c] = (gc < N && gk < K) ? B[(long long)gk * N + gc] : 0.0f;
            }
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < GEMM_BK; ++kk) {
            float a[4], b[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) a[i] = As[kk][ty + 16 * i];
#pragma unroll
            for (int j = 0; j < 4; ++j) b[j] = Bs[kk][tx + 16 * j];
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }

#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int r = row0 + ty + 16 * i;
        if (r >= M) continue;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int c = col0 + tx + 16 * j;  // consecutive threads write consecutive columns
            if (c >= N) continue;
            float v = acc[i][j] * alpha;
            if (bias != nullptr) v += bias[c];
            if (EPI == EPI_RELU) v = fmaxf(v, 0.0f);
            if (EPI == EPI_GELU) v = 0.5f * v * (1.0f + erff(v * 0.70710678118654752440f));
            const long long o = (long long)r * N + c;
            if (residual != nullptr) v = residual[o] + v;
            C[o] = v;
        }
    }
}

template <bool B_NK, int EPI>
static void launch_gemm(const float* A, const float* B, const float* bias, const float* residual, float* C,
                        int64_t M, int64_t N, int64_t K, int64_t batch, int64_t stride_a, int64_t stride_b,
                        int64_t stride_c, float alpha, cudaStream_t stream) {
    TORCH_CHECK(M > 0 && N > 0 && K > 0 && batch > 0, "gemm: empty problem");
    TORCH_CHECK(M <= INT32_MAX && N <= INT32_MAX && K <= INT32_MAX, "gemm: dimension too large");
    TORCH_CHECK((M + GEMM_BM - 1) / GEMM_BM <= 65535 && batch <= 65535, "gemm: grid too large");
    const dim3 grid((N + GEMM_BN - 1) / GEMM_BN, (M + GEMM_BM - 1) / GEMM_BM, batch);
    gemm_kernel<B_NK, EPI><<<grid, GEMM_THREADS, 0, stream>>>(A, B, bias, residual, C, (int)M, (int)N, (int)K,
                                                               stride_a, stride_b, stride_c, alpha);
    ARENA_CHECK_LAUNCH("gemm");
}

// One block per row (grid-stride over rows): block max of x * scale, block sum of exp, then each
// thread rescales exactly the elements it wrote. Safe in place (x == y): every element is read and
// written by the same thread.
__global__ void softmax_rows_kernel(const float* x, float* y, int64_t rows, int64_t cols, float scale) {
    __shared__ float scratch[32];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float* xr = x + r * cols;
        float* yr = y + r * cols;
        float mx = -INFINITY;
        for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) mx = fmaxf(mx, xr[c] * scale);
        mx = block_max(mx, scratch);
        float sum = 0.0f;
        for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
            const float e = expf(xr[c] * scale - mx);
            yr[c] = e;
            sum += e;
        }
        sum = block_sum(sum, scratch);
        const float inv = 1.0f / sum;
        for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) yr[c] *= inv;
    }
}

static void launch_softmax_rows(const float* x, float* y, int64_t rows, int64_t cols, float scale,
                                cudaStream_t stream) {
    TORCH_CHECK(rows > 0 && cols > 0, "softmax: empty rows");
    const unsigned int grid = (unsigned int)std::min<int64_t>(rows, 65535LL * 8);
    softmax_rows_kernel<<<grid, 256, 0, stream>>>(x, y, rows, cols, scale);
    ARENA_CHECK_LAUNCH("softmax");
}

// q, k, v = x W^T + b (three GEMMs over all batch * seq rows); scores = scale * q k^T (batched GEMM,
// k read as an N x K operand, no transpose copy); softmax over rows in place; out = P v (batched GEMM).
torch::Tensor attention_head_forward(torch::Tensor x, torch::Tensor wq, torch::Tensor bq, torch::Tensor wk,
                                     torch::Tensor bk, torch::Tensor wv, torch::Tensor bv, double scale) {
    for (const auto& t : {x, wq, bq, wk, bk, wv, bv}) {
        ARENA_CHECK_INPUT(t, "attention_head");
    }
    TORCH_CHECK(x.dim() == 3, "attention_head: x must be (batch, seq, dim)");
    const int64_t B = x.size(0), S = x.size(1), D = x.size(2), H = wq.size(0);
    for (const auto& w : {wq, wk, wv}) TORCH_CHECK(w.dim() == 2 && w.size(0) == H && w.size(1) == D, "attention_head: weight shape");
    for (const auto& b : {bq, bk, bv}) TORCH_CHECK(b.numel() == H, "attention_head: bias shape");
    const at::cuda::CUDAGuard guard(x.device());
    auto xc = x.contiguous();
    auto wqc = wq.contiguous(), wkc = wk.contiguous(), wvc = wv.contiguous();
    auto bqc = bq.contiguous(), bkc = bk.contiguous(), bvc = bv.contiguous();
    auto opts = xc.options();
    auto q = torch::empty({B * S, H}, opts), k = torch::empty({B * S, H}, opts), v = torch::empty({B * S, H}, opts);
    auto probs = torch::empty({B, S, S}, opts);
    auto out = torch::empty({B, S, H}, opts);
    cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    const float* xin = xc.data_ptr<float>();
    launch_gemm<true, EPI_NONE>(xin, wqc.data_ptr<float>(), bqc.data_ptr<float>(), nullptr, q.data_ptr<float>(),
                                B * S, H, D, 1, 0, 0, 0, 1.0f, stream);
    launch_gemm<true, EPI_NONE>(xin, wkc.data_ptr<float>(), bkc.data_ptr<float>(), nullptr, k.data_ptr<float>(),
                                B * S, H, D, 1, 0, 0, 0, 1.0f, stream);
    launch_gemm<true, EPI_NONE>(xin, wvc.data_ptr<float>(), bvc.data_ptr<float>(), nullptr, v.data_ptr<float>(),
                                B * S, H, D, 1, 0, 0, 0, 1.0f, stream);
    launch_gemm<true, EPI_NONE>(q.data_ptr<float>(), k.data_ptr<float>(), nullptr, nullptr, probs.data_ptr<float>(),
                                S, S, H, B, S * H, S * H, S * S, static_cast<float>(scale), stream);
    launch_softmax_rows(probs.data_ptr<float>(), probs.data_ptr<float>(), B * S, S, 1.0f, stream);
    launch_gemm<false, EPI_NONE>(probs.data_ptr<float>(), v.data_ptr<float>(), nullptr, nullptr, out.data_ptr<float>(),
                                 S, H, S, B, S * S, S * H, S * H, 1.0f, stream);
    return out;
}
"""

cpp_source = "torch::Tensor attention_head_forward(torch::Tensor x, torch::Tensor wq, torch::Tensor bq, torch::Tensor wk, torch::Tensor bk, torch::Tensor wv, torch::Tensor bv, double scale);"

_ext = load_inline(
    name="arena_attention_head_cuda",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["attention_head_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim: int, head_dim: int):
        super().__init__()
        self.q_proj = nn.Linear(dim, head_dim)
        self.k_proj = nn.Linear(dim, head_dim)
        self.v_proj = nn.Linear(dim, head_dim)
        self.scale = 1.0 / math.sqrt(head_dim)
        with torch.no_grad():  # same init as Model (the evaluator also copies its state dict)
            self.q_proj.weight.mul_(3.0)
            self.k_proj.weight.mul_(3.0)

    def forward(self, x):
        return _ext.attention_head_forward(
            x,
            self.q_proj.weight,
            self.q_proj.bias,
            self.k_proj.weight,
            self.k_proj.bias,
            self.v_proj.weight,
            self.v_proj.bias,
            self.scale,
        )
