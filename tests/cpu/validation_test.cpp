// Every invalid argument is rejected with normkit::Error naming it, before any output is touched:
// each case starts from a valid call (checked to pass), breaks one thing, and compares every
// poisoned output buffer byte for byte afterwards.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cpu_helpers.h"

namespace normkit::test {
namespace {

template <class Args>
struct BadCase {
  std::string label;
  std::function<void(Args&)> mutate;
  std::string argument;  // must appear as 'argument' in what()
  std::string detail;    // further text what() must contain ("" = none)
};

/// `call` must throw normkit::Error whose what() names 'argument' and contains `detail` (if any).
void expect_error_naming(const std::function<void()>& call, const std::string& argument, const std::string& detail) {
  try {
    call();
    ADD_FAILURE() << "no normkit::Error thrown";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("'" + argument + "'"), std::string::npos) << message;
    if (!detail.empty()) {
      EXPECT_NE(message.find(detail), std::string::npos) << message;
    }
  }
}

/// Runs `call(args)` for each case on a fresh copy of `valid`; all `outputs` must be unchanged.
template <class Args, class Call>
void expect_all_rejected(const Args& valid, const std::vector<BadCase<Args>>& cases, Call call,
                         const std::vector<const HostBuffer*>& outputs) {
  std::vector<std::vector<unsigned char>> before;
  for (const HostBuffer* b : outputs) before.push_back(b->bytes);
  for (const BadCase<Args>& c : cases) {
    SCOPED_TRACE(c.label);
    Args args = valid;
    c.mutate(args);
    expect_error_naming([&] { call(args); }, c.argument, c.detail);
    for (std::size_t i = 0; i < outputs.size(); ++i)
      EXPECT_EQ(outputs[i]->bytes, before[i]) << "output " << i << " was written before the error";
  }
}

constexpr std::int64_t kM = 3, kN = 1024;
constexpr std::int64_t kHuge = std::int64_t(1) << 40;  // kHuge * kHuge overflows int64
/// The PyTorch binding's setting: no pointer queries (ExecConfig::caller_checked_pointers).
const ExecConfig kCpuCallerChecked = [] {
  ExecConfig c{Device::Cpu};
  c.caller_checked_pointers = true;
  return c;
}();

// ---------------------------------------------------------------------------------------------

struct LayerForwardSetup {
  HostMatrix x{DType::F32, kM, kN}, y{DType::F32, kM, kN};
  HostVector weight{DType::F32, kN}, bias{DType::F32, kN}, mean{DType::F32, kM}, rstd{DType::F32, kM};
  LayerForwardSetup() {
    std::mt19937_64 rng(1);
    x.fill_normal(rng);
    weight.fill_normal(rng);
    bias.fill_normal(rng);
  }
  LayerNormForwardArgs args() { return {x.cview(), weight.cview(), bias.cview(), 1e-5, y.view(), mean.view(), rstd.view()}; }
};

TEST(Validation, LayerNormForwardRejectsEachBadArgument) {
  using A = LayerNormForwardArgs;
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const std::vector<BadCase<A>> cases = {
      {"negative rows", [](A& a) { a.x.rows = -1; }, "x", "-1"},
      {"negative cols", [](A& a) { a.x.cols = -2; }, "x", "-2"},
      {"N = 0 with M > 0", [](A& a) { a.x.cols = 0; a.y.cols = 0; }, "x", "N = 0"},
      {"unknown dtype", [](A& a) { a.x.dtype = DType(9); }, "x", "unknown"},
      {"x stride below N", [](A& a) { a.x.row_stride = 1000; }, "x", "row_stride = 1000 < N = 1024"},
      {"x stride negative", [](A& a) { a.x.row_stride = -5; }, "x", "-5"},
      {"size overflows int64",
       [](A& a) {
         a.x.rows = a.y.rows = kHuge;
         a.x.row_stride = a.y.row_stride = kHuge;
       },
       "x", "overflow"},
      {"y dtype", [](A& a) { a.y.dtype = DType::F16; }, "y", "f16"},
      {"y rows", [](A& a) { a.y.rows = kM + 1; }, "y", "expected M = 3"},
      {"y negative rows", [](A& a) { a.y.rows = -1; }, "y", "-1"},
      {"y cols", [](A& a) { a.y.cols = kN - 1; }, "y", "expected N = 1024"},
      {"y stride below N", [](A& a) { a.y.row_stride = kN - 1; }, "y", "1023"},
      {"weight size", [](A& a) { a.weight->size = 1000; }, "weight",
       "normkit.layer_norm_forward: argument 'weight' has 1000 elements, expected N = 1024"},
      {"weight f16 with f32 activations", [](A& a) { a.weight->dtype = DType::F16; }, "weight", "f16"},
      {"weight f64 with f32 activations", [](A& a) { a.weight->dtype = DType::F64; }, "weight", "f64"},
      {"bias size", [](A& a) { a.bias->size = kN + 1; }, "bias", "1025"},
      {"bias dtype differs from weight", [](A& a) { a.bias->dtype = DType::BF16; }, "bias", "'weight'"},
      {"mean size", [](A& a) { a.mean.size = 2; }, "mean", "expected M = 3"},
      {"mean f64 with f32 activations", [](A& a) { a.mean.dtype = DType::F64; }, "mean", "f64"},
      {"rstd dtype", [](A& a) { a.rstd.dtype = DType::F16; }, "rstd", "f16"},
      {"null x", [](A& a) { a.x.data = nullptr; }, "x", "null"},
      {"null y", [](A& a) { a.y.data = nullptr; }, "y", "null"},
      {"null weight", [](A& a) { a.weight->data = nullptr; }, "weight", "null"},
      {"null bias", [](A& a) { a.bias->data = nullptr; }, "bias", "null"},
      {"null mean", [](A& a) { a.mean.data = nullptr; }, "mean", "null"},
      {"null rstd", [](A& a) { a.rstd.data = nullptr; }, "rstd", "null"},
      {"negative eps", [](A& a) { a.eps = -1e-5; }, "eps", ""},
      {"NaN eps", [nan](A& a) { a.eps = nan; }, "eps", "nan"},
      {"infinite eps", [inf](A& a) { a.eps = inf; }, "eps", "inf"},
      // outputs sharing memory with an input or another output (an in-place call)
      {"y is x", [](A& a) { a.y.data = const_cast<void*>(a.x.data); }, "y", "overlaps 'x'"},
      {"y one row into x", [](A& a) { a.y.data = static_cast<float*>(const_cast<void*>(a.x.data)) + kN; }, "y",
       "overlaps 'x'"},
      {"mean is rstd", [](A& a) { a.mean.data = a.rstd.data; }, "mean", "overlaps 'rstd'"},
      {"rstd inside weight", [](A& a) { a.rstd.data = static_cast<float*>(const_cast<void*>(a.weight->data)) + 5; },
       "rstd", "overlaps 'weight'"},
  };
  LayerForwardSetup s;
  layer_norm_forward(s.args(), kCpu);  // the unbroken call is valid
  poison(s.y.buffer);
  poison(s.mean.buffer);
  poison(s.rstd.buffer);
  expect_all_rejected(s.args(), cases, [](const A& a) { layer_norm_forward(a, kCpu); },
                      {&s.y.buffer, &s.mean.buffer, &s.rstd.buffer});
  // A caller that vouches for its pointers' device skips only the runtime's pointer query.
  expect_all_rejected(s.args(), cases, [](const A& a) { layer_norm_forward(a, kCpuCallerChecked); },
                      {&s.y.buffer, &s.mean.buffer, &s.rstd.buffer});
}

// ---------------------------------------------------------------------------------------------

struct LayerBackwardSetup {
  // f16 activations with f32 weights: the mixed case that must stay accepted.
  HostMatrix dy{DType::F16, kM, kN}, x{DType::F16, kM, kN}, dx{DType::F16, kM, kN};
  HostVector mean{DType::F32, kM}, rstd{DType::F32, kM}, weight{DType::F32, kN};
  HostVector dweight{DType::F32, kN}, dbias{DType::F32, kN};
  LayerBackwardSetup() {
    std::mt19937_64 rng(2);
    dy.fill_normal(rng);
    x.fill_normal(rng);
    weight.fill_normal(rng);
    mean.fill_normal(rng);
    for (std::int64_t r = 0; r < kM; ++r) rstd.buffer.set(r, 1.5);
  }
  LayerNormBackwardArgs args() {
    return {dy.cview(), x.cview(), mean.cview(), rstd.cview(), weight.cview(), dx.view(), dweight.view(), dbias.view()};
  }
};

TEST(Validation, LayerNormBackwardRejectsEachBadArgument) {
  using A = LayerNormBackwardArgs;
  const std::vector<BadCase<A>> cases = {
      {"x negative rows", [](A& a) { a.x.rows = -1; }, "x", "-1"},
      {"N = 0 with M > 0", [](A& a) { a.x.cols = a.dy.cols = 0; a.dx->cols = 0; }, "x", "N = 0"},
      {"dy dtype", [](A& a) { a.dy.dtype = DType::BF16; }, "dy", "bf16"},
      {"dy rows", [](A& a) { a.dy.rows = kM - 1; }, "dy", "expected M = 3"},
      {"dy cols", [](A& a) { a.dy.cols = kN + 1; }, "dy", "expected N = 1024"},
      {"dy stride below N", [](A& a) { a.dy.row_stride = 512; }, "dy", "row_stride = 512 < N = 1024"},
      {"dx dtype", [](A& a) { a.dx->dtype = DType::F32; }, "dx", "f32"},
      {"dx cols", [](A& a) { a.dx->cols = 1; }, "dx", "expected N = 1024"},
      {"dx stride below N", [](A& a) { a.dx->row_stride = 100; }, "dx", "100"},
      {"mean size", [](A& a) { a.mean.size = 4; }, "mean", "expected M = 3"},
      {"mean dtype", [](A& a) { a.mean.dtype = DType::F16; }, "mean", "f16"},
      {"rstd size", [](A& a) { a.rstd.size = 0; }, "rstd", "expected M = 3"},
      {"rstd dtype", [](A& a) { a.rstd.dtype = DType::BF16; }, "rstd", "bf16"},
      {"weight size", [](A& a) { a.weight->size = 1000; }, "weight",
       "normkit.layer_norm_backward: argument 'weight' has 1000 elements, expected N = 1024"},
      {"weight bf16 with f16 activations", [](A& a) { a.weight->dtype = DType::BF16; }, "weight", "bf16"},
      {"dweight dtype differs from weight", [](A& a) { a.dweight->dtype = DType::F16; }, "dweight", "'weight'"},
      {"dweight size", [](A& a) { a.dweight->size = kN - 1; }, "dweight", "1023"},
      {"dbias dtype differs from weight", [](A& a) { a.dbias->dtype = DType::F16; }, "dbias", "'weight'"},
      {"dbias size", [](A& a) { a.dbias->size = 1; }, "dbias", "expected N = 1024"},
      {"dweight f64 without weight",
       [](A& a) {
         a.weight.reset();
         a.dweight->dtype = DType::F64;
       },
       "dweight", "f64"},
      {"null dy", [](A& a) { a.dy.data = nullptr; }, "dy", "null"},
      {"null x", [](A& a) { a.x.data = nullptr; }, "x", "null"},
      {"null mean", [](A& a) { a.mean.data = nullptr; }, "mean", "null"},
      {"null rstd", [](A& a) { a.rstd.data = nullptr; }, "rstd", "null"},
      {"null weight", [](A& a) { a.weight->data = nullptr; }, "weight", "null"},
      {"null dx", [](A& a) { a.dx->data = nullptr; }, "dx", "null"},
      {"null dweight", [](A& a) { a.dweight->data = nullptr; }, "dweight", "null"},
      {"null dbias", [](A& a) { a.dbias->data = nullptr; }, "dbias", "null"},
      {"dy size overflows int64",
       [](A& a) {
         a.x.rows = a.dy.rows = a.dx->rows = kHuge;
         a.dy.row_stride = kHuge;
       },
       "dy", "overflow"},
      {"dx is dy (in place)", [](A& a) { a.dx->data = const_cast<void*>(a.dy.data); }, "dx", "overlaps 'dy'"},
      {"dbias is dweight", [](A& a) { a.dbias->data = a.dweight->data; }, "dbias", "overlaps 'dweight'"},
      {"dweight inside x", [](A& a) { a.dweight->data = const_cast<void*>(a.x.data); }, "dweight", "overlaps 'x'"},
  };
  LayerBackwardSetup s;
  layer_norm_backward(s.args(), kCpu);
  poison(s.dx.buffer);
  poison(s.dweight.buffer);
  poison(s.dbias.buffer);
  expect_all_rejected(s.args(), cases, [](const A& a) { layer_norm_backward(a, kCpu); },
                      {&s.dx.buffer, &s.dweight.buffer, &s.dbias.buffer});
  expect_all_rejected(s.args(), cases, [](const A& a) { layer_norm_backward(a, kCpuCallerChecked); },
                      {&s.dx.buffer, &s.dweight.buffer, &s.dbias.buffer});
}

// ---------------------------------------------------------------------------------------------

TEST(Validation, RmsNormForwardRejectsEachBadArgument) {
  using A = RmsNormForwardArgs;
  HostMatrix x(DType::BF16, kM, kN), y(DType::BF16, kM, kN);
  HostVector weight(DType::BF16, kN), rstd(DType::F32, kM);
  std::mt19937_64 rng(3);
  x.fill_normal(rng);
  weight.fill_normal(rng);
  const A valid{x.cview(), weight.cview(), 1e-6, y.view(), rstd.view()};
  rms_norm_forward(valid, kCpu);
  poison(y.buffer);
  poison(rstd.buffer);
  const std::vector<BadCase<A>> cases = {
      {"weight size", [](A& a) { a.weight->size = 1000; }, "weight",
       "normkit.rms_norm_forward: argument 'weight' has 1000 elements, expected N = 1024"},
      {"weight f16 with bf16 activations", [](A& a) { a.weight->dtype = DType::F16; }, "weight", "f16"},
      {"rstd size", [](A& a) { a.rstd.size = 1; }, "rstd", "expected M = 3"},
      {"rstd bf16", [](A& a) { a.rstd.dtype = DType::BF16; }, "rstd", "bf16"},
      {"y stride below N", [](A& a) { a.y.row_stride = 7; }, "y", "7"},
      {"null y", [](A& a) { a.y.data = nullptr; }, "y", "null"},
      {"negative eps", [](A& a) { a.eps = -1; }, "eps", ""},
  };
  expect_all_rejected(valid, cases, [](const A& a) { rms_norm_forward(a, kCpu); }, {&y.buffer, &rstd.buffer});
}

TEST(Validation, RmsNormBackwardRejectsEachBadArgument) {
  using A = RmsNormBackwardArgs;
  HostMatrix dy(DType::F32, kM, kN), x(DType::F32, kM, kN), dx(DType::F32, kM, kN);
  HostVector rstd(DType::F32, kM), weight(DType::F32, kN), dweight(DType::F32, kN);
  std::mt19937_64 rng(4);
  dy.fill_normal(rng);
  x.fill_normal(rng);
  weight.fill_normal(rng);
  for (std::int64_t r = 0; r < kM; ++r) rstd.buffer.set(r, 0.8);
  const A valid{dy.cview(), x.cview(), rstd.cview(), weight.cview(), dx.view(), dweight.view()};
  rms_norm_backward(valid, kCpu);
  poison(dx.buffer);
  poison(dweight.buffer);
  const std::vector<BadCase<A>> cases = {
      {"rstd size", [](A& a) { a.rstd.size = 2; }, "rstd",
       "normkit.rms_norm_backward: argument 'rstd' has 2 elements, expected M = 3"},
      {"rstd f64 with f32 activations", [](A& a) { a.rstd.dtype = DType::F64; }, "rstd", "f64"},
      {"dweight size", [](A& a) { a.dweight->size = 7; }, "dweight", "expected N = 1024"},
      {"dweight dtype differs from weight", [](A& a) { a.dweight->dtype = DType::F16; }, "dweight", "'weight'"},
      {"dx rows", [](A& a) { a.dx->rows = 1; }, "dx", "expected M = 3"},
      {"null dweight", [](A& a) { a.dweight->data = nullptr; }, "dweight", "null"},
  };
  expect_all_rejected(valid, cases, [](const A& a) { rms_norm_backward(a, kCpu); }, {&dx.buffer, &dweight.buffer});
}

// ---------------------------------------------------------------------------------------------

// f64 is CPU-only: asking CUDA for it is an argument error (not a CudaError), in any build.
// Outputs may share a buffer with inputs as long as no byte is shared: [x | y] in each row of one
// buffer (row stride 2N), the statistics in the gap of a strided x. The same layouts shifted by one
// element onto the input are refused (the check compares rows, not spans).
TEST(Validation, OutputsInterleavedWithInputsWithoutSharingBytesAreAccepted) {
  constexpr std::int64_t m = 5, n = 64, gap = 8;
  HostMatrix both(DType::F32, m, 2 * n, 2 * n);  // row r: x in [0, n), y in [n, 2n)
  HostMatrix x_with_gap(DType::F32, m, n, n + gap);
  std::mt19937_64 rng(3);
  both.fill_normal(rng);
  for (std::int64_t r = 0; r < m; ++r)
    for (std::int64_t c = 0; c < n; ++c) x_with_gap.set(r, c, both.get(r, c));
  float* base = static_cast<float*>(both.buffer.data());
  const ConstRows x{base, DType::F32, m, n, 2 * n};
  HostVector mean(DType::F32, m), rstd(DType::F32, m);
  LayerNormForwardArgs args{x, std::nullopt, std::nullopt, 1e-5, Rows{base + n, DType::F32, m, n, 2 * n},
                            mean.view(), rstd.view()};
  layer_norm_forward(args, kCpu);

  // the reference: the same rows, y in a buffer of its own, the statistics in x_with_gap's gaps
  HostMatrix y(DType::F32, m, n);
  float* gap_base = static_cast<float*>(x_with_gap.buffer.data());
  LayerNormForwardArgs apart{x_with_gap.cview(), std::nullopt, std::nullopt, 1e-5, y.view(),
                             Vec{gap_base + n, DType::F32, m}, Vec{gap_base + (n + gap) + n, DType::F32, m}};
  ASSERT_LE(m, gap) << "the statistics must fit the gap of one row";
  layer_norm_forward(apart, kCpu);
  for (std::int64_t r = 0; r < m; ++r) {
    EXPECT_EQ(mean.buffer.get(r), double(gap_base[n + r])) << "row " << r;
    for (std::int64_t c = 0; c < n; ++c) ASSERT_EQ(both.get(r, n + c), y.get(r, c)) << r << ", " << c;
  }

  LayerNormForwardArgs shifted = args;
  shifted.y.data = base + n - 1;  // y's first element is x's last
  expect_error_naming([&] { layer_norm_forward(shifted, kCpu); }, "y", "overlaps 'x'");
  LayerNormForwardArgs into_row = apart;
  into_row.mean.data = gap_base + n - 1;  // the gap starts one element later
  expect_error_naming([&] { layer_norm_forward(into_row, kCpu); }, "mean", "overlaps 'x'");

  // backward: dx in the second half of dy's rows
  HostMatrix dy_dx(DType::F32, m, 2 * n, 2 * n);
  dy_dx.fill_normal(rng);
  float* g = static_cast<float*>(dy_dx.buffer.data());
  HostVector dweight(DType::F32, n);
  LayerNormBackwardArgs back{ConstRows{g, DType::F32, m, n, 2 * n}, x, mean.cview(), rstd.cview(), std::nullopt,
                             Rows{g + n, DType::F32, m, n, 2 * n}, dweight.view(), std::nullopt};
  layer_norm_backward(back, kCpu);
  back.dx->data = g + 1;
  expect_error_naming([&] { layer_norm_backward(back, kCpu); }, "dx", "overlaps 'dy'");
}

TEST(Validation, F64OnCudaIsRejectedNamingTheDtype) {
  const ExecConfig cuda{Device::Cuda};
  HostMatrix x(DType::F64, 2, 8), y(DType::F64, 2, 8), dy(DType::F64, 2, 8), dx(DType::F64, 2, 8);
  HostVector mean(DType::F64, 2), rstd(DType::F64, 2), dweight(DType::F64, 8);
  std::mt19937_64 rng(7);
  x.fill_normal(rng);
  dy.fill_normal(rng);
  mean.fill_normal(rng);
  rstd.fill_normal(rng, 2.0, 0.1);
  auto expect_f64_error = [](const std::function<void()>& call) { expect_error_naming(call, "x", "f64"); };
  expect_f64_error([&] { layer_norm_forward({x.cview(), std::nullopt, std::nullopt, 1e-5, y.view(), mean.view(), rstd.view()}, cuda); });
  expect_f64_error([&] { rms_norm_forward({x.cview(), std::nullopt, 1e-5, y.view(), rstd.view()}, cuda); });
  expect_f64_error([&] {
    layer_norm_backward({dy.cview(), x.cview(), mean.cview(), rstd.cview(), std::nullopt, dx.view(), dweight.view(), std::nullopt}, cuda);
  });
  expect_f64_error([&] { rms_norm_backward({dy.cview(), x.cview(), rstd.cview(), std::nullopt, dx.view(), dweight.view()}, cuda); });
  EXPECT_TRUE(all_bytes_poisoned(y.buffer));
  EXPECT_TRUE(all_bytes_poisoned(dx.buffer));
  EXPECT_TRUE(all_bytes_poisoned(dweight.buffer));
}

// The CUDA path indexes within a row with 32-bit ints: longer rows are an argument error naming x,
// raised before any memory is touched (the views below point at a few bytes only).
TEST(Validation, RowTooLongForCudaIsRejectedNamingX) {
  const std::int64_t n = kMaxCudaRowLength + 1;
  std::vector<float> few(16, 1.f);
  float stats[2] = {0.f, 1.f};
  LayerNormForwardArgs forward;
  forward.x = {few.data(), DType::F32, 1, n};
  forward.y = {few.data(), DType::F32, 1, n};
  forward.mean = {&stats[0], DType::F32, 1};
  forward.rstd = {&stats[1], DType::F32, 1};
  RmsNormBackwardArgs backward;
  backward.dy = {few.data(), DType::F32, 1, n};
  backward.x = {few.data(), DType::F32, 1, n};
  backward.rstd = {&stats[1], DType::F32, 1};
  backward.dx = Rows{few.data(), DType::F32, 1, n};
  expect_error_naming([&] { layer_norm_forward(forward, ExecConfig{Device::Cuda}); }, "x", std::to_string(n));
  expect_error_naming([&] { rms_norm_backward(backward, ExecConfig{Device::Cuda}); }, "x", std::to_string(n));
  EXPECT_EQ(few, std::vector<float>(16, 1.f));  // nothing written
}

// Pointer checks need the CUDA runtime to classify memory: with a device, plain pageable host
// memory handed to a CUDA call is an argument error naming the argument.
TEST(Validation, PageableHostPointerOnCudaIsRejected) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device: pointers cannot be classified";
  HostMatrix x(DType::F32, 2, 8), y(DType::F32, 2, 8);
  HostVector mean(DType::F32, 2), rstd(DType::F32, 2);
  try {
    layer_norm_forward({x.cview(), std::nullopt, std::nullopt, 1e-5, y.view(), mean.view(), rstd.view()}, ExecConfig{Device::Cuda});
    ADD_FAILURE() << "no normkit::Error thrown";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'x'"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(all_bytes_poisoned(y.buffer));
}

}  // namespace
}  // namespace normkit::test
