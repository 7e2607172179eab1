#include "device/torch/row_stable.h"

#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <vector>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define PROBEKIT_ROW_STABLE_AVX2 1
#endif

namespace probekit::device {

namespace {

constexpr int kLanes = 8;
// A tile is 3 input rows x 4 weight rows: 12 accumulators plus 3 inputs and a weight fill AVX2's 16 registers.
constexpr int64_t kTileRows = 3, kTileCols = 4;
// A block is 48 input rows x 64 weight rows, what threads share out; it runs over k in chunks of 512, so that a chunk
// of its rows (96 and 128 KB) stays in L2 while its tiles pass over it (block and chunk sizes timed on a 2-core AMD
// EPYC: bench/cpu_products_bench). Between chunks each output's eight lanes wait in memory: every lane still adds
// its terms in k order, so the chunking changes no bit.
constexpr int64_t kBlockRows = 16 * kTileRows, kBlockCols = 16 * kTileCols, kDepthChunk = 512;

struct Operands {
  const float* x;  // [M, K]
  const float* w;  // [N, K]
  const float* bias;  // [N] or null
  float* out;  // [M, N]
  int64_t rows, cols, depth;
};

// The k a tile adds this time: [begin, end), a multiple of 8 long; `first` starts its lanes at zero, `last` finishes
// its outputs.
struct DepthChunk {
  int64_t begin, end;
  bool first, last;
};

// One output from its eight lane sums: the tail of k past the last whole group of eight into its lanes (lane k mod 8,
// as a longer input would have it, so zeros appended change no bit), the lanes in a fixed tree (as AVX's horizontal
// sum pairs them), then the bias. Both paths end here, so they agree to the bit.
inline float finish_output(float* lanes, const float* x, const float* w, int64_t whole, int64_t depth, const float* bias) {
  for (int64_t k = whole; k < depth; ++k) lanes[k - whole] = std::fma(x[k], w[k], lanes[k - whole]);
  float sum = ((lanes[0] + lanes[4]) + (lanes[2] + lanes[6])) + ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7]));
  return bias != nullptr ? sum + *bias : sum;
}

// A tile's outputs from its lanes [R][C][8], once its last chunk is in.
template <int R, int C>
void finish_tile(const Operands& o, int64_t row, int64_t col, float* lanes) {
  const int64_t whole = o.depth - o.depth % kLanes;
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) {
      o.out[(row + r) * o.cols + col + c] =
          finish_output(lanes + (r * C + c) * kLanes, o.x + (row + r) * o.depth, o.w + (col + c) * o.depth, whole,
                        o.depth, o.bias ? o.bias + col + c : nullptr);
    }
  }
}

// The portable tile: each lane a chain of correctly rounded fused multiply-adds, as vfmadd computes them.
template <int R, int C>
void tile_portable(const Operands& o, int64_t row, int64_t col, const DepthChunk& chunk, float* lanes) {
  if (chunk.first) std::fill(lanes, lanes + R * C * kLanes, 0.0f);
  for (int64_t k = chunk.begin; k < chunk.end; k += kLanes) {
    for (int r = 0; r < R; ++r) {
      const float* x = o.x + (row + r) * o.depth + k;
      for (int c = 0; c < C; ++c) {
        const float* w = o.w + (col + c) * o.depth + k;
        float* acc = lanes + (r * C + c) * kLanes;
        for (int l = 0; l < kLanes; ++l) acc[l] = std::fma(x[l], w[l], acc[l]);
      }
    }
  }
  if (chunk.last) finish_tile<R, C>(o, row, col, lanes);
}

#ifdef PROBEKIT_ROW_STABLE_AVX2
template <int R, int C>
__attribute__((target("avx2,fma"))) void tile_avx2(const Operands& o, int64_t row, int64_t col, const DepthChunk& chunk,
                                                   float* lanes) {
  __m256 acc[R][C];
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) acc[r][c] = chunk.first ? _mm256_setzero_ps() : _mm256_loadu_ps(lanes + (r * C + c) * kLanes);
  }
  for (int64_t k = chunk.begin; k < chunk.end; k += kLanes) {
    __m256 x[R];
    for (int r = 0; r < R; ++r) x[r] = _mm256_loadu_ps(o.x + (row + r) * o.depth + k);
    for (int c = 0; c < C; ++c) {
      const __m256 w = _mm256_loadu_ps(o.w + (col + c) * o.depth + k);
      for (int r = 0; r < R; ++r) acc[r][c] = _mm256_fmadd_ps(x[r], w, acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) _mm256_storeu_ps(lanes + (r * C + c) * kLanes, acc[r][c]);
  }
  if (chunk.last) finish_tile<R, C>(o, row, col, lanes);
}
#endif

using TileFunction = void (*)(const Operands&, int64_t, int64_t, const DepthChunk&, float*);

// Tiles of every edge shape, [rows - 1][cols - 1], for one path.
template <template <int, int> class Tile>
struct TileTable {
  TileFunction tiles[kTileRows][kTileCols] = {
      {Tile<1, 1>::run, Tile<1, 2>::run, Tile<1, 3>::run, Tile<1, 4>::run},
      {Tile<2, 1>::run, Tile<2, 2>::run, Tile<2, 3>::run, Tile<2, 4>::run},
      {Tile<3, 1>::run, Tile<3, 2>::run, Tile<3, 3>::run, Tile<3, 4>::run},
  };
};

template <int R, int C>
struct PortableTile {
  static void run(const Operands& o, int64_t row, int64_t col, const DepthChunk& chunk, float* lanes) {
    tile_portable<R, C>(o, row, col, chunk, lanes);
  }
};

#ifdef PROBEKIT_ROW_STABLE_AVX2
template <int R, int C>
struct Avx2Tile {
  static void run(const Operands& o, int64_t row, int64_t col, const DepthChunk& chunk, float* lanes) {
    tile_avx2<R, C>(o, row, col, chunk, lanes);
  }
};

bool cpu_has_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
#else
bool cpu_has_avx2() { return false; }
#endif

}  // namespace

bool row_stable_uses_avx2() {
  static const bool avx2 = cpu_has_avx2();
  return avx2;
}

namespace {

const TileTable<PortableTile> kPortable;
#ifdef PROBEKIT_ROW_STABLE_AVX2
const TileTable<Avx2Tile> kAvx2;
#endif

const TileFunction (&chosen_tiles())[kTileRows][kTileCols] {
#ifdef PROBEKIT_ROW_STABLE_AVX2
  if (row_stable_uses_avx2()) return kAvx2.tiles;
#endif
  return kPortable.tiles;
}

// Rows [row_start, row_end) x columns [col_start, col_end) of the product (at most a block), chunk by chunk of k,
// tile by tile; `lanes` holds kBlockRows x kBlockCols x 8 floats.
void product_block(const Operands& o, const TileFunction (&tiles)[kTileRows][kTileCols], int64_t row_start,
                   int64_t row_end, int64_t col_start, int64_t col_end, float* lanes) {
  const int64_t whole = o.depth - o.depth % kLanes;
  for (int64_t begin = 0; begin == 0 || begin < whole; begin += kDepthChunk) {
    const DepthChunk chunk{begin, std::min(whole, begin + kDepthChunk), begin == 0, begin + kDepthChunk >= whole};
    float* tile_lanes = lanes;
    for (int64_t col = col_start; col < col_end; col += kTileCols) {
      const int64_t cols = std::min(kTileCols, col_end - col);
      for (int64_t row = row_start; row < row_end; row += kTileRows) {
        tiles[std::min(kTileRows, row_end - row) - 1][cols - 1](o, row, col, chunk, tile_lanes);
        tile_lanes += kTileRows * kTileCols * kLanes;
      }
    }
  }
}

void fixed_order_product(const Operands& o, const TileFunction (&tiles)[kTileRows][kTileCols]) {
  const int64_t row_blocks = (o.rows + kBlockRows - 1) / kBlockRows, col_blocks = (o.cols + kBlockCols - 1) / kBlockCols;
  at::parallel_for(0, row_blocks * col_blocks, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> lanes(static_cast<size_t>(kBlockRows * kBlockCols * kLanes));
    for (int64_t block = begin; block < end; ++block) {
      const int64_t row_start = (block % row_blocks) * kBlockRows, col_start = (block / row_blocks) * kBlockCols;
      product_block(o, tiles, row_start, std::min(o.rows, row_start + kBlockRows), col_start,
                    std::min(o.cols, col_start + kBlockCols), lanes.data());
    }
  });
}

bool takes_fixed_order(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  const bool all_float = x.scalar_type() == at::kFloat && weight.scalar_type() == at::kFloat &&
                         (!bias.defined() || bias.scalar_type() == at::kFloat);
  const bool all_cpu = x.is_cpu() && weight.is_cpu() && (!bias.defined() || bias.is_cpu());
  const bool needs_grad = at::GradMode::is_enabled() &&
                          (x.requires_grad() || weight.requires_grad() || (bias.defined() && bias.requires_grad()));
  return all_float && all_cpu && !needs_grad && weight.dim() == 2 && x.dim() >= 1 && x.size(-1) == weight.size(1) &&
         (!bias.defined() || (bias.dim() == 1 && bias.size(0) == weight.size(0)));
}

at::Tensor fixed_order_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                              const TileFunction (&tiles)[kTileRows][kTileCols]) {
  const int64_t depth = x.size(-1);
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() = weight.size(0);
  at::Tensor out = at::empty(shape, x.options());
  if (out.numel() == 0) return out;
  if (depth == 0) return bias.defined() ? out.copy_(bias.expand_as(out)) : out.zero_();
  const at::Tensor inputs = x.contiguous(), weights = weight.contiguous();
  const at::Tensor biases = bias.defined() ? bias.contiguous() : at::Tensor();
  fixed_order_product({inputs.data_ptr<float>(), weights.data_ptr<float>(), biases.defined() ? biases.data_ptr<float>() : nullptr,
                       out.data_ptr<float>(), out.numel() / weight.size(0), weight.size(0), depth},
                      tiles);
  return out;
}

}  // namespace

at::Tensor row_stable_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  if (!takes_fixed_order(x, weight, bias)) return bias.defined() ? at::linear(x, weight, bias) : at::linear(x, weight);
  return fixed_order_linear(x, weight, bias, chosen_tiles());
}

void fixed_order_products(const float* x, int64_t rows, const float* w, int64_t cols, int64_t depth, float* out) {
  if (rows == 0 || cols == 0) return;
  const Operands o{x, w, nullptr, out, rows, cols, depth};
  std::vector<float> lanes(static_cast<size_t>(kBlockRows * kBlockCols * kLanes));
  for (int64_t row = 0; row < rows; row += kBlockRows) {
    for (int64_t col = 0; col < cols; col += kBlockCols) {
      product_block(o, chosen_tiles(), row, std::min(rows, row + kBlockRows), col, std::min(cols, col + kBlockCols),
                    lanes.data());
    }
  }
}

namespace {

bool takes_fixed_elementwise(const at::Tensor& x) { return x.device().is_cpu() && x.scalar_type() == at::kFloat; }

}  // namespace

at::Tensor row_stable_sigmoid(const at::Tensor& x) {
  if (!takes_fixed_elementwise(x)) return at::sigmoid(x);
  const at::Tensor in = x.contiguous();
  at::Tensor out = at::empty_like(in);
  const float* from = in.data_ptr<float>();
  float* to = out.data_ptr<float>();
  for (int64_t i = 0; i < in.numel(); ++i) to[i] = static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(from[i]))));
  return out;
}

at::Tensor row_stable_softmax(const at::Tensor& x) {
  if (!takes_fixed_elementwise(x) || x.dim() == 0) return at::softmax(x, -1);
  const at::Tensor in = x.contiguous();
  at::Tensor out = at::empty_like(in);
  const int64_t width = in.size(-1), rows = width == 0 ? 0 : in.numel() / width;
  for (int64_t r = 0; r < rows; ++r) {
    const float* from = in.data_ptr<float>() + r * width;
    float* to = out.data_ptr<float>() + r * width;
    const double highest = *std::max_element(from, from + width);
    double sum = 0;
    for (int64_t i = 0; i < width; ++i) sum += std::exp(from[i] - highest);
    for (int64_t i = 0; i < width; ++i) to[i] = static_cast<float>(std::exp(from[i] - highest) / sum);
  }
  return out;
}

at::Tensor row_stable_linear_portable(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  if (!takes_fixed_order(x, weight, bias)) return bias.defined() ? at::linear(x, weight, bias) : at::linear(x, weight);
  return fixed_order_linear(x, weight, bias, kPortable.tiles);
}

}  // namespace probekit::device
