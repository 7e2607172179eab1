// fused::few_row_product: x [rows, K] times weight [N, K] transposed for a decode step's few rows (a token and the
// probes' suffix per stream). Such a product only has to read the weight once, at the memory's bandwidth; cuBLAS's
// kernels for a dozen rows reached 45 to 85% of it. Here each warp runs tensor-core MMAs (m16n8k16) of all the
// rows against 8 * kTiles rows of the weight over its share of K, the weight streamed once in 16-byte loads, and
// the block's warps then add their shares in a fixed order: a row's numbers do not depend on the others'.
//
// One 16-byte load gives a lane 8 consecutive k of a row; the MMA's fragments want pairs spread over 16 k, but a
// product sums over k in any order, so each MMA takes k in the order the loads bring them, the same order for x
// and for the weight (see the kernel).
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "model/fused_ops.h"

namespace probekit::model::fused {

namespace {

constexpr int kWarps = 4;   // a block's warps, which split K between them
constexpr int kChunk = 32;  // the k one 16-byte load per lane covers across a group of 4 lanes
constexpr int kUnroll = 4;  // chunks whose loads a warp issues before their MMAs: loads in flight hide the latency

template <typename T>
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (std::is_same_v<T, c10::BFloat16>) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
#endif
}

// The block's warps' shares added in warp order by the first warp, which writes the outputs: C's registers 0, 1
// hold row g's columns 2t, 2t+1 of the tile, registers 2, 3 row g + 8's.
template <typename T, int kRowTiles, int kTiles>
__device__ __forceinline__ void add_shares_and_store(const float (&acc)[kRowTiles][kTiles][4], const T* bias, T* out,
                                                     int rows, int n, int first_column) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  __shared__ float shares[kWarps - 1][kRowTiles][kTiles][4][32];
  if (warp > 0) {
#pragma unroll
    for (int m = 0; m < kRowTiles; ++m) {
#pragma unroll
      for (int j = 0; j < kTiles; ++j) {
#pragma unroll
        for (int r = 0; r < 4; ++r) shares[warp - 1][m][j][r][lane] = acc[m][j][r];
      }
    }
  }
  __syncthreads();
  if (warp > 0) return;
#pragma unroll
  for (int m = 0; m < kRowTiles; ++m) {
#pragma unroll
    for (int j = 0; j < kTiles; ++j) {
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        float sum = acc[m][j][r];
        for (int other = 0; other < kWarps - 1; ++other) sum += shares[other][m][j][r][lane];
        const int row = m * 16 + (r / 2) * 8 + g, column = first_column + j * 8 + 2 * t + r % 2;
        if (row >= rows || column >= n) continue;
        if (bias != nullptr) sum += static_cast<float>(bias[column]);
        out[static_cast<int64_t>(row) * n + column] = static_cast<T>(sum);
      }
    }
  }
}

// Lane (g = lane / 4, t = lane % 4) loads k = 8t..8t+7 of a chunk for x's rows g and g + 8 of each 16-row tile and
// for the weight's row g of each 8-row tile. The m16n8k16 fragments hold, for the MMA's k index j: A's rows g and
// g + 8 at j = 2t, 2t+1 (registers 0, 1) and 2t+8, 2t+9 (registers 2, 3), B's column g at the same j. Mapping
// j = 2t, 2t+1 to the chunk's 8t, 8t+1 and j = 2t+8, 2t+9 to 8t+2, 8t+3 (the first MMA; 8t+4..8t+7 the second)
// is a function of j alone, so both operands agree and the two MMAs sum the chunk's 32 k once each.
template <typename T, int kRowTiles, int kTiles>
__global__ void __launch_bounds__(32 * kWarps)
    few_row_product_kernel(const T* __restrict__ x, const T* __restrict__ weight, const T* __restrict__ bias,
                           T* __restrict__ out, int rows, int n, int k) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const int first_column = blockIdx.x * 8 * kTiles, chunks = k / kChunk;
  const uint4* x_rows[kRowTiles][2];
  bool x_live[kRowTiles][2];
#pragma unroll
  for (int m = 0; m < kRowTiles; ++m) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = m * 16 + h * 8 + g;
      x_live[m][h] = row < rows;
      x_rows[m][h] = reinterpret_cast<const uint4*>(x + static_cast<int64_t>(min(row, rows - 1)) * k) + t;
    }
  }
  const uint4* w_rows[kTiles];
#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
    // A weight row past n is read (its last row) but its column is never written.
    w_rows[j] = reinterpret_cast<const uint4*>(weight + static_cast<int64_t>(min(first_column + j * 8 + g, n - 1)) * k) + t;
  }
  float acc[kRowTiles][kTiles][4] = {};
  const uint4 zero = make_uint4(0, 0, 0, 0);
  // The block's warps take interleaved chunks: together they read each weight row's bytes in one run.
  for (int base = warp; base < chunks; base += kWarps * kUnroll) {
    uint4 w[kUnroll][kTiles], a[kUnroll][kRowTiles][2];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int chunk = base + u * kWarps;
      const bool live = chunk < chunks;
#pragma unroll
      for (int j = 0; j < kTiles; ++j) w[u][j] = live ? __ldcs(w_rows[j] + chunk * 4) : zero;  // streamed: read once
#pragma unroll
      for (int m = 0; m < kRowTiles; ++m) {
#pragma unroll
        for (int h = 0; h < 2; ++h) a[u][m][h] = live && x_live[m][h] ? __ldg(x_rows[m][h] + chunk * 4) : zero;
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int m = 0; m < kRowTiles; ++m) {
        const uint32_t first[4] = {a[u][m][0].x, a[u][m][1].x, a[u][m][0].y, a[u][m][1].y};
        const uint32_t second[4] = {a[u][m][0].z, a[u][m][1].z, a[u][m][0].w, a[u][m][1].w};
#pragma unroll
        for (int j = 0; j < kTiles; ++j) {
          mma<T>(acc[m][j], first, w[u][j].x, w[u][j].y);
          mma<T>(acc[m][j], second, w[u][j].z, w[u][j].w);
        }
      }
    }
  }
  add_shares_and_store<T, kRowTiles, kTiles>(acc, bias, out, rows, n, first_column);
}

bool enabled_by_environment() {
  static const bool enabled = [] {
    const char* value = std::getenv("PROBEKIT_FEW_ROW_PRODUCTS");
    return value == nullptr || std::strcmp(value, "0") != 0;
  }();
  return enabled;
}

bool aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <typename T, int kRowTiles>
void launch(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, at::Tensor& out, int tiles) {
  const int rows = static_cast<int>(x.size(0)), k = static_cast<int>(x.size(1)), n = static_cast<int>(weight.size(0));
  const T* bias_data = bias.defined() ? bias.data_ptr<T>() : nullptr;
  auto stream = at::cuda::getCurrentCUDAStream();
  auto grid = [&](int per_block) { return (n + per_block - 1) / per_block; };
  if (tiles == 1) {
    few_row_product_kernel<T, kRowTiles, 1><<<grid(8), 32 * kWarps, 0, stream>>>(
        x.data_ptr<T>(), weight.data_ptr<T>(), bias_data, out.data_ptr<T>(), rows, n, k);
  } else if (tiles == 2) {
    few_row_product_kernel<T, kRowTiles, 2><<<grid(16), 32 * kWarps, 0, stream>>>(
        x.data_ptr<T>(), weight.data_ptr<T>(), bias_data, out.data_ptr<T>(), rows, n, k);
  } else {
    few_row_product_kernel<T, kRowTiles, 4><<<grid(32), 32 * kWarps, 0, stream>>>(
        x.data_ptr<T>(), weight.data_ptr<T>(), bias_data, out.data_ptr<T>(), rows, n, k);
  }
}

// Weight rows per warp: as many as keep two blocks per multiprocessor busy, so that x is read fewer times.
int tiles_for(int64_t n) {
  const int64_t processors = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  if (n >= 32 * 2 * processors) return 4;
  return n >= 16 * 2 * processors ? 2 : 1;
}

}  // namespace

bool few_row_product_serves(const at::Tensor& x, const at::Tensor& weight) {
  if (!x.is_cuda() || !weight.is_cuda() || x.scalar_type() != weight.scalar_type()) return false;
  if (x.scalar_type() != at::kBFloat16 && x.scalar_type() != at::kHalf) return false;
  const int64_t k = x.size(-1), rows = k == 0 ? 0 : x.numel() / k;
  if (rows == 0 || rows > kFewRowProductMaxRows || k % kChunk != 0 || weight.dim() != 2 || weight.size(1) != k) return false;
  if (!weight.is_contiguous() || !aligned(weight.data_ptr())) return false;
  return at::cuda::getCurrentDeviceProperties()->major >= 8 && enabled_by_environment();
}

at::Tensor few_row_product(const at::Tensor& x_in, const at::Tensor& weight, const at::Tensor& bias_in, int tiles) {
  TORCH_CHECK(few_row_product_serves(x_in, weight), "few_row_product: unsupported inputs");
  c10::cuda::CUDAGuard guard(x_in.device());
  const int64_t k = x_in.size(-1), n = weight.size(0);
  at::Tensor x = x_in.reshape({-1, k}).contiguous();
  if (!aligned(x.data_ptr())) x = x.clone();
  at::Tensor bias = bias_in.defined() ? bias_in.to(weight.scalar_type()).contiguous() : at::Tensor();
  at::Tensor out = at::empty({x.size(0), n}, x.options());
  if (tiles == 0) tiles = tiles_for(n);
  TORCH_CHECK(tiles == 1 || tiles == 2 || tiles == 4, "few_row_product: tiles must be 1, 2 or 4");
  const bool one_tile = x.size(0) <= 16;
  if (x.scalar_type() == at::kBFloat16) {
    one_tile ? launch<c10::BFloat16, 1>(x, weight, bias, out, tiles) : launch<c10::BFloat16, 2>(x, weight, bias, out, tiles);
  } else {
    one_tile ? launch<c10::Half, 1>(x, weight, bias, out, tiles) : launch<c10::Half, 2>(x, weight, bias, out, tiles);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  std::vector<int64_t> shape = x_in.sizes().vec();
  shape.back() = n;
  return out.view(shape);
}

}  // namespace probekit::model::fused
