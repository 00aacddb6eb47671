"""Reference C++ kernel for arena/attention_head: q, k, v projections as blocked GEMMs (bias in the
epilogue); per batch, scores = q k^T with scale + row softmax in the epilogue, then out = P v."""

import math

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <algorithm>
#include <cmath>

// C (M x N) = A (M x K) @ B (K x N), all row-major; C is overwritten. Blocks of MB rows of C go
// through at::parallel_for (one thread unless the extension is built with OpenMP); every C element
// adds its K products in ascending k whatever the thread count, so the result is deterministic. The innermost n-loop is a unit-stride axpy that the
// compiler vectorises without reassociating any sum. After a block of rows is complete,
// epilogue(m, row) runs on each of its rows while they are still in cache.
template <typename Epilogue>
static void gemm_kn(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K,
                    const Epilogue& epilogue) {
    constexpr int64_t MB = 16, NB = 256, KB = 128;
    at::parallel_for(0, (M + MB - 1) / MB, 1, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
            const int64_t m0 = t * MB, m1 = std::min(M, m0 + MB);
            for (int64_t m = m0; m < m1; ++m) std::fill(C + m * N, C + (m + 1) * N, 0.0f);
            for (int64_t n0 = 0; n0 < N; n0 += NB) {
                const int64_t n1 = std::min(N, n0 + NB);
                for (int64_t k0 = 0; k0 < K; k0 += KB) {
                    const int64_t k1 = std::min(K, k0 + KB);
                    for (int64_t m = m0; m < m1; ++m) {
                        float* __restrict__ c = C + m * N;
                        const float* __restrict__ a = A + m * K;
                        for (int64_t k = k0; k < k1; ++k) {
                            const float av = a[k];
                            const float* __restrict__ b = B + k * N;
                            for (int64_t n = n0; n < n1; ++n) c[n] += av * b[n];
                        }
                    }
                }
            }
            for (int64_t m = m0; m < m1; ++m) epilogue(m, C + m * N);
        }
    });
}

// Dst (cols x rows) = Src^T for Src (rows x cols), in 32 x 32 blocks.
static void transpose_into(const float* src, float* dst, int64_t rows, int64_t cols) {
    constexpr int64_t T = 32;
    for (int64_t r0 = 0; r0 < rows; r0 += T)
        for (int64_t c0 = 0; c0 < cols; c0 += T)
            for (int64_t r = r0; r < std::min(rows, r0 + T); ++r)
                for (int64_t c = c0; c < std::min(cols, c0 + T); ++c) dst[c * rows + r] = src[r * cols + c];
}

// y (M x N) = x (M x K) @ W^T + b, W (N x K); wt_scratch holds K x N floats.
static void linear_into(const float* x, const float* w, const float* b, float* y, float* wt_scratch,
                        int64_t M, int64_t N, int64_t K) {
    transpose_into(w, wt_scratch, N, K);
    gemm_kn(x, wt_scratch, y, M, N, K, [&](int64_t, float* row) {
        for (int64_t n = 0; n < N; ++n) row[n] += b[n];
    });
}

torch::Tensor attention_head_forward(torch::Tensor x, torch::Tensor wq, torch::Tensor bq, torch::Tensor wk,
                                     torch::Tensor bk, torch::Tensor wv, torch::Tensor bv, double scale) {
    for (const auto& t : {x, wq, bq, wk, bk, wv, bv}) {
        TORCH_CHECK(t.device().is_cpu(), "attention_head: tensors must be on the CPU");
        TORCH_CHECK(t.scalar_type() == torch::kFloat32, "attention_head: tensors must be float32");
    }
    TORCH_CHECK(x.dim() == 3, "attention_head: x must be (batch, seq, dim)");
    const int64_t B = x.size(0), S = x.size(1), D = x.size(2), H = wq.size(0);
    for (const auto& w : {wq, wk, wv}) TORCH_CHECK(w.dim() == 2 && w.size(0) == H && w.size(1) == D, "attention_head: weight shape");
    for (const auto& b : {bq, bk, bv}) TORCH_CHECK(b.numel() == H, "attention_head: bias shape");
    auto xc = x.contiguous();
    auto wqc = wq.contiguous(), wkc = wk.contiguous(), wvc = wv.contiguous();
    auto bqc = bq.contiguous(), bkc = bk.contiguous(), bvc = bv.contiguous();
    auto opts = xc.options();
    auto q = torch::empty({B * S, H}, opts), k = torch::empty({B * S, H}, opts), v = torch::empty({B * S, H}, opts);
    auto scratch = torch::empty({std::max(D * H, H * S)}, opts);
    float* scr = scratch.data_ptr<float>();
    const float* xin = xc.data_ptr<float>();
    linear_into(xin, wqc.data_ptr<float>(), bqc.data_ptr<float>(), q.data_ptr<float>(), scr, B * S, H, D);
    linear_into(xin, wkc.data_ptr<float>(), bkc.data_ptr<float>(), k.data_ptr<float>(), scr, B * S, H, D);
    linear_into(xin, wvc.data_ptr<float>(), bvc.data_ptr<float>(), v.data_ptr<float>(), scr, B * S, H, D);
    auto probs = torch::empty({S, S}, opts);
    auto out = torch::empty({B, S, H}, opts);
    const float s = static_cast<float>(scale);
    for (int64_t b = 0; b < B; ++b) {
        transpose_into(k.data_ptr<float>() + b * S * H, scr, S, H);  // k_b^T: H x S
        gemm_kn(q.data_ptr<float>() + b * S * H, scr, probs.data_ptr<float>(), S, S, H, [&](int64_t, float* row) {
            float mx = -INFINITY;
            for (int64_t j = 0; j < S; ++j) {
                row[j] *= s;
                mx = std::max(mx, row[j]);
            }
            float sum = 0.0f;
            for (int64_t j = 0; j < S; ++j) {
                row[j] = std::exp(row[j] - mx);
                sum += row[j];
            }
            const float inv = 1.0f / sum;
            for (int64_t j = 0; j < S; ++j) row[j] *= inv;
        });
        gemm_kn(probs.data_ptr<float>(), v.data_ptr<float>() + b * S * H, out.data_ptr<float>() + b * S * H, S, H, S,
                [](int64_t, float*) {});
    }
    return out;
}
"""

_ext = load_inline(
    name="arena_attention_head_cpu",
    cpp_sources=cpp_source,
    functions=["attention_head_forward"],
    extra_cflags=["-O3"],
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
