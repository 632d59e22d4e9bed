// PyTorch operators over the normkit C++ API: torch.ops.normkit.*
//
// A thin layer. Each op turns its tensors into normkit views (ConstRows / Rows / Vec), allocates
// the outputs (and the backward workspace) with torch's allocator on the input's device, runs the
// call on torch's current CUDA stream, and turns normkit errors into Python RuntimeErrors carrying
// normkit's message (which names the offending argument).
//
//   CUDA f32/f16/bf16 tensors -> normkit's CUDA kernels (Device::Cuda)
//   CPU tensors of f32/f16/bf16/f64 -> normkit's float64 reference (Device::Cpu)
//   CUDA f64 tensors -> copied to the CPU, reference path, copied back (for gradcheck; synchronous)
//
// The fake (meta) kernels are registered in Python (python/normkit/_ops.py), the autograd of the
// forward ops in C++ (autograd.cpp); this file holds the schemas and the CPU/CUDA kernels.
#include <torch/extension.h>

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <array>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#ifdef NORMKIT_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#endif

#include "backward_strategy.h"
#include "normkit/normkit.h"
#include "op_handles.h"

namespace {

using at::Tensor;

// ---------------------------------------------------------------------------------------------
// errors
// ---------------------------------------------------------------------------------------------

/// Runs `fn`, turning normkit's exceptions into c10::Error (RuntimeError in Python) with the
/// library's own message.
template <class Fn>
auto translate_errors(Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const normkit::Error& e) {
    TORCH_CHECK(false, e.what());
  } catch (const normkit::CudaError& e) {
    TORCH_CHECK(false, "normkit CUDA error: ", e.what());
  }
}

// ---------------------------------------------------------------------------------------------
// tensors -> views
// ---------------------------------------------------------------------------------------------

/// A dtype as PyTorch users write it (torch.float16), as the fake kernels' messages print it; the
/// library's own messages say f16.
std::string torch_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "torch.float32";
    case at::kHalf: return "torch.float16";
    case at::kBFloat16: return "torch.bfloat16";
    case at::kDouble: return "torch.float64";
    case at::kLong: return "torch.int64";
    case at::kInt: return "torch.int32";
    default: return std::string("torch.") + c10::toString(t);
  }
}

normkit::DType to_dtype(const char* op, const char* name, const Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return normkit::DType::F32;
    case at::kHalf: return normkit::DType::F16;
    case at::kBFloat16: return normkit::DType::BF16;
    case at::kDouble: return normkit::DType::F64;
    default:
      TORCH_CHECK(false, "normkit.", op, ": argument '", name, "' has dtype ", torch_dtype(t.scalar_type()),
                  ", expected float32, float16, bfloat16 or float64");
  }
}

/// Shape bookkeeping of one call: M rows of N elements, from x's shape and normalized_shape.
struct Shape {
  std::vector<int64_t> normalized;
  int64_t lead_dims = 0;  // x.dim() - len(normalized_shape)
  int64_t rows = 1;       // M
  int64_t cols = 1;       // N
};

Shape check_shape(const char* op, const Tensor& x, at::IntArrayRef normalized_shape) {
  Shape s;
  s.normalized = normalized_shape.vec();
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  TORCH_CHECK(k >= 1, "normkit.", op, ": argument 'normalized_shape' is empty, expected at least one dimension");
  TORCH_CHECK(x.dim() >= k, "normkit.", op, ": argument 'normalized_shape' ", normalized_shape, " has ", k,
              " dimensions but 'x' has only ", x.dim(), " (shape ", x.sizes(), ")");
  TORCH_CHECK(x.sizes().slice(x.dim() - k).equals(normalized_shape), "normkit.", op,
              ": argument 'normalized_shape' is ", normalized_shape, ", expected the trailing dimensions of 'x' (shape ",
              x.sizes(), ")");
  s.lead_dims = x.dim() - k;
  for (int64_t d = 0; d < x.dim(); ++d) (d < s.lead_dims ? s.rows : s.cols) *= x.size(d);
  return s;
}

/// Row stride (in elements) when x's rows are evenly spaced with each row's N elements contiguous;
/// nullopt when the tensor has to be made contiguous first.
std::optional<int64_t> uniform_row_stride(const Tensor& x, const Shape& s) {
  // normalized dims: contiguous within a row (size-1 dims place no constraint)
  int64_t expected = 1;
  for (int64_t d = x.dim() - 1; d >= s.lead_dims; --d) {
    if (x.size(d) != 1 && x.stride(d) != expected) return std::nullopt;
    expected *= x.size(d);
  }
  // leading dims: collapsible into one dimension with a single stride
  std::optional<int64_t> row_stride;
  int64_t span = 0;  // elements covered by the inner leading dims, in units of row_stride
  for (int64_t d = s.lead_dims - 1; d >= 0; --d) {
    if (x.size(d) == 1) continue;
    if (!row_stride) {
      row_stride = x.stride(d);
      span = x.size(d);
    } else {
      if (x.stride(d) != *row_stride * span) return std::nullopt;
      span *= x.size(d);
    }
  }
  if (!row_stride) return s.cols;  // at most one row
  if (*row_stride < s.cols) return std::nullopt;  // rows overlap or are interleaved
  return row_stride;
}

/// x itself when its rows can be described by (data, row_stride), else a contiguous copy.
std::pair<Tensor, int64_t> as_rows(const Tensor& x, const Shape& s) {
  if (auto stride = uniform_row_stride(x, s)) return {x, *stride};
  return {x.contiguous(), s.cols};
}

normkit::ConstRows const_rows(const char* op, const char* name, const Tensor& t, int64_t row_stride,
                              const Shape& s) {
  return {t.data_ptr(), to_dtype(op, name, t), s.rows, s.cols, row_stride};
}

normkit::Rows rows_of(const char* op, const char* name, Tensor& t, const Shape& s) {
  return {t.data_ptr(), to_dtype(op, name, t), s.rows, s.cols, s.cols};
}

normkit::ConstVec const_vec(const char* op, const char* name, const Tensor& t) {
  return {t.data_ptr(), to_dtype(op, name, t), t.numel()};
}

normkit::Vec vec_of(const char* op, const char* name, Tensor& t) {
  return {t.data_ptr(), to_dtype(op, name, t), t.numel()};
}

/// Shape of mean/rstd: the leading dims of x followed by a 1 per normalized dim.
std::vector<int64_t> stats_shape(const Tensor& x, const Shape& s) {
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().begin() + s.lead_dims);
  shape.insert(shape.end(), s.normalized.size(), 1);
  return shape;
}

at::ScalarType stats_dtype(const Tensor& x) {
  return x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

/// Rows of N = 0 elements (M > 0): PyTorch returns them, with y empty and the statistics of an empty
/// row as its kernels compute them -- mean 0 (LayerNorm) and rstd NaN (a variance, or mean square, of
/// 0 / 0) -- and their backward has nothing to write (dx, dweight, dbias have no elements). normkit's
/// C++ API rejects such rows (a normalized row needs an element); this layer answers them itself so
/// that the ops stay drop-ins, on every device (no kernel of normkit's runs).
bool empty_normalized_rows(const Shape& s) { return s.rows > 0 && s.cols == 0; }

void fill_empty_row_stats(Tensor* mean, Tensor& rstd) {
  if (mean != nullptr) mean->zero_();
  rstd.fill_(std::numeric_limits<double>::quiet_NaN());
}

/// Device, dtype and shape checks the library cannot make (it sees pointers, not tensors).
void check_tensor(const char* op, const char* name, const Tensor& t, const Tensor& x) {
  TORCH_CHECK(t.defined(), "normkit.", op, ": argument '", name, "' is undefined");
  TORCH_CHECK(t.device().is_cpu() || t.device().is_cuda(), "normkit.", op, ": argument '", name,
              "' is on device ", t.device(), ", expected a CPU or CUDA tensor");
  TORCH_CHECK(t.device() == x.device(), "normkit.", op, ": argument '", name, "' is on ", t.device(),
              " but 'x' is on ", x.device());
  TORCH_CHECK(t.layout() == at::kStrided, "normkit.", op, ": argument '", name, "' has layout ", t.layout(),
              ", expected a dense (strided) tensor");
  to_dtype(op, name, t);
}

void check_param(const char* op, const char* name, const std::optional<Tensor>& p, const Tensor& x,
                 const Shape& s) {
  if (!p || !p->defined()) return;
  check_tensor(op, name, *p, x);
  TORCH_CHECK(p->sizes().equals(s.normalized), "normkit.", op, ": argument '", name, "' has shape ", p->sizes(),
              ", expected normalized_shape ", at::IntArrayRef(s.normalized));
}

/// weight and bias (absent or undefined for RMSNorm's): each as check_param, then the library's rule for
/// their dtypes (normkit.h), checked here so that the message speaks PyTorch: the weight (else the bias) has
/// x's dtype or float32, and a bias has the weight's dtype.
void check_params(const char* op, const std::optional<Tensor>& weight, const std::optional<Tensor>& bias,
                  const Tensor& x, const Shape& s) {
  check_param(op, "weight", weight, x, s);
  check_param(op, "bias", bias, x, s);
  const char* owner = nullptr;
  at::ScalarType owner_dtype = at::kFloat;
  for (const auto& [name, p] : {std::pair{"weight", &weight}, std::pair{"bias", &bias}}) {
    if (!*p || !(*p)->defined()) continue;
    const at::ScalarType t = (*p)->scalar_type();
    if (owner == nullptr) {
      TORCH_CHECK(t == x.scalar_type() || t == at::kFloat, "normkit.", op, ": argument '", name, "' has dtype ",
                  torch_dtype(t), ", expected ", torch_dtype(x.scalar_type()), " (the dtype of 'x')",
                  x.scalar_type() == at::kFloat ? "" : " or torch.float32");
      owner = name;
      owner_dtype = t;
    } else {
      TORCH_CHECK(t == owner_dtype, "normkit.", op, ": argument '", name, "' has dtype ", torch_dtype(t),
                  ", expected ", torch_dtype(owner_dtype), " (the dtype of '", owner, "')");
    }
  }
}

std::optional<Tensor> defined(const std::optional<Tensor>& t) {
  if (t && t->defined()) return t;
  return std::nullopt;
}

std::optional<normkit::ConstVec> opt_vec(const char* op, const char* name, const std::optional<Tensor>& t) {
  if (!t) return std::nullopt;
  return const_vec(op, name, *t);
}

/// Where a call runs, with a device guard and torch's current stream for CUDA tensors.
struct Exec {
  normkit::ExecConfig config;
  c10::OptionalDeviceGuard guard;
};

void make_exec(Exec& exec, const char* op, const Tensor& x, std::string_view strategy) {
  exec.config.strategy = translate_errors([&] { return normkit::parse_strategy(std::string(strategy)); });
  // check_tensor has put every tensor of the call on x's device (and every CUDA tensor is device
  // memory), so the library need not ask the CUDA runtime about each pointer again.
  exec.config.caller_checked_pointers = true;
  if (x.device().is_cpu()) {
    exec.config.device = normkit::Device::Cpu;
    return;
  }
#ifdef NORMKIT_WITH_CUDA
  exec.guard.reset_device(x.device());
  exec.config.device = normkit::Device::Cuda;
  exec.config.stream = at::cuda::getCurrentCUDAStream(x.device().index()).stream();
#else
  TORCH_CHECK(false, "normkit.", op, ": 'x' is a CUDA tensor but this normkit build has no CUDA "
              "(it was built CPU-only; reinstall with a CUDA-enabled torch and nvcc available)");
#endif
}

using OptTensor = std::optional<Tensor>;

OptTensor opt(const Tensor& t) {
  if (t.defined()) return t;
  return std::nullopt;
}

OptTensor opt_to(const OptTensor& t, const at::Device& d) {
  if (!t) return std::nullopt;
  return t->to(d);
}

bool on_cuda_f64(const Tensor& x) { return x.device().is_cuda() && x.scalar_type() == at::kDouble; }

std::optional<Tensor> to_cpu(const std::optional<Tensor>& t) {
  if (!t || !t->defined()) return std::nullopt;
  return t->cpu();
}

// ---------------------------------------------------------------------------------------------
// LayerNorm
// ---------------------------------------------------------------------------------------------

std::tuple<Tensor, Tensor, Tensor> layer_norm_forward(const Tensor& x_in, at::IntArrayRef normalized_shape,
                                                      const std::optional<Tensor>& weight_in,
                                                      const std::optional<Tensor>& bias_in, double eps) {
  constexpr const char* op = "layer_norm_forward";
  check_tensor(op, "x", x_in, x_in);
  const Shape s = check_shape(op, x_in, normalized_shape);
  check_params(op, weight_in, bias_in, x_in, s);
  if (on_cuda_f64(x_in)) {
    auto [y, mean, rstd] =
        layer_norm_forward(x_in.cpu(), normalized_shape, to_cpu(weight_in), to_cpu(bias_in), eps);
    return {y.to(x_in.device()), mean.to(x_in.device()), rstd.to(x_in.device())};
  }
  auto weight = defined(weight_in);
  auto bias = defined(bias_in);
  if (weight) weight = weight->contiguous();
  if (bias) bias = bias->contiguous();
  auto [x, x_stride] = as_rows(x_in, s);

  Tensor y = at::empty(x_in.sizes(), x_in.options().memory_format(at::MemoryFormat::Contiguous));
  const auto st_opts = x_in.options().dtype(stats_dtype(x_in));
  Tensor mean = at::empty(stats_shape(x_in, s), st_opts);
  Tensor rstd = at::empty(stats_shape(x_in, s), st_opts);
  if (s.rows == 0) return {y, mean, rstd};
  if (empty_normalized_rows(s)) {
    fill_empty_row_stats(&mean, rstd);
    return {y, mean, rstd};
  }

  Exec exec;
  make_exec(exec, op, x_in, "auto");
  normkit::LayerNormForwardArgs args;
  args.x = const_rows(op, "x", x, x_stride, s);
  args.weight = opt_vec(op, "weight", weight);
  args.bias = opt_vec(op, "bias", bias);
  args.eps = eps;
  args.y = rows_of(op, "y", y, s);
  args.mean = vec_of(op, "mean", mean);
  args.rstd = vec_of(op, "rstd", rstd);
  translate_errors([&] { normkit::layer_norm_forward(args, exec.config); });
  return {y, mean, rstd};
}

/// dtype of dweight/dbias: the weight's, else the bias's, else x's (PyTorch allocates dbias like
/// the bias it is the gradient of).
at::ScalarType param_grad_dtype(const std::optional<Tensor>& first, const std::optional<Tensor>& second,
                                const Tensor& x) {
  if (first) return first->scalar_type();
  if (second) return second->scalar_type();
  return x.scalar_type();
}

void check_stats(const char* op, const char* name, const Tensor& t, const Tensor& x, const Shape& s) {
  check_tensor(op, name, t, x);
  TORCH_CHECK(t.numel() == s.rows, "normkit.", op, ": argument '", name, "' has ", t.numel(),
              " elements (shape ", t.sizes(), "), expected one per row, M = ", s.rows);
  TORCH_CHECK(t.scalar_type() == stats_dtype(x), "normkit.", op, ": argument '", name, "' has dtype ",
              torch_dtype(t.scalar_type()), ", expected ", torch_dtype(stats_dtype(x)), " (the statistics of ",
              torch_dtype(x.scalar_type()), " 'x')");
}

void check_grad_out(const char* op, const Tensor& dy, const Tensor& x) {
  check_tensor(op, "grad_out", dy, x);
  TORCH_CHECK(dy.sizes().equals(x.sizes()), "normkit.", op, ": argument 'grad_out' has shape ", dy.sizes(),
              ", expected the shape of 'x' ", x.sizes());
  TORCH_CHECK(dy.scalar_type() == x.scalar_type(), "normkit.", op, ": argument 'grad_out' has dtype ",
              torch_dtype(dy.scalar_type()), ", expected ", torch_dtype(x.scalar_type()), " (the dtype of 'x')");
}

std::tuple<OptTensor, OptTensor, OptTensor> layer_norm_backward(const Tensor& dy_in, const Tensor& x_in,
                                                       at::IntArrayRef normalized_shape, const Tensor& mean_in,
                                                       const Tensor& rstd_in, const std::optional<Tensor>& weight_in,
                                                       const std::optional<Tensor>& bias_in,
                                                       std::array<bool, 3> output_mask, std::string_view strategy) {
  constexpr const char* op = "layer_norm_backward";
  check_tensor(op, "x", x_in, x_in);
  const Shape s = check_shape(op, x_in, normalized_shape);
  check_grad_out(op, dy_in, x_in);
  check_stats(op, "mean", mean_in, x_in, s);
  check_stats(op, "rstd", rstd_in, x_in, s);
  check_params(op, weight_in, bias_in, x_in, s);
  if (on_cuda_f64(x_in)) {
    auto [dx, dw, db] = layer_norm_backward(dy_in.cpu(), x_in.cpu(), normalized_shape, mean_in.cpu(), rstd_in.cpu(),
                                            to_cpu(weight_in), to_cpu(bias_in), output_mask, strategy);
    const auto d = x_in.device();
    return {opt_to(dx, d), opt_to(dw, d), opt_to(db, d)};
  }
  const auto weight = defined(weight_in);
  const auto bias = defined(bias_in);
  const Tensor weight_c = weight ? weight->contiguous() : Tensor();
  auto [x, x_stride] = as_rows(x_in, s);
  auto [dy, dy_stride] = as_rows(dy_in, s);
  const Tensor mean = mean_in.contiguous();
  const Tensor rstd = rstd_in.contiguous();

  Tensor dx, dweight, dbias;
  if (output_mask[0]) dx = at::empty(x_in.sizes(), x_in.options().memory_format(at::MemoryFormat::Contiguous));
  // Without a weight there is no parameter to take a gradient for: dweight is None (documented).
  if (output_mask[1] && weight) dweight = at::empty(s.normalized, weight->options());
  if (output_mask[2])
    dbias = at::empty(s.normalized, x_in.options().dtype(param_grad_dtype(bias, weight, x_in)));

  Exec exec;
  make_exec(exec, op, x_in, strategy);
  if (s.rows == 0) {
    if (dweight.defined()) dweight.zero_();
    if (dbias.defined()) dbias.zero_();
    return {opt(dx), opt(dweight), opt(dbias)};
  }
  if (empty_normalized_rows(s)) return {opt(dx), opt(dweight), opt(dbias)};  // no elements to write
  if (!dx.defined() && !dweight.defined() && !dbias.defined()) return {opt(dx), opt(dweight), opt(dbias)};

  normkit::LayerNormBackwardArgs args;
  args.dy = const_rows(op, "grad_out", dy, dy_stride, s);
  args.x = const_rows(op, "x", x, x_stride, s);
  args.mean = const_vec(op, "mean", mean);
  args.rstd = const_vec(op, "rstd", rstd);
  if (weight) args.weight = const_vec(op, "weight", weight_c);
  if (dx.defined()) args.dx = rows_of(op, "dx", dx, s);
  if (dweight.defined()) args.dweight = vec_of(op, "dweight", dweight);
  if (dbias.defined()) args.dbias = vec_of(op, "dbias", dbias);

  translate_errors([&] {
    if (exec.config.device == normkit::Device::Cpu) {
      normkit::layer_norm_backward(args, exec.config, normkit::Workspace{});
      return;
    }
    const std::size_t bytes = normkit::layer_norm_backward_workspace_size(args, exec.config);
    Tensor ws = bytes ? at::empty({static_cast<int64_t>(bytes)}, x_in.options().dtype(at::kByte)) : Tensor();
    normkit::layer_norm_backward(args, exec.config, normkit::Workspace{bytes ? ws.data_ptr() : nullptr, bytes});
  });
  return {opt(dx), opt(dweight), opt(dbias)};
}

// ---------------------------------------------------------------------------------------------
// RMSNorm
// ---------------------------------------------------------------------------------------------

std::tuple<Tensor, Tensor> rms_norm_forward(const Tensor& x_in, at::IntArrayRef normalized_shape,
                                            const std::optional<Tensor>& weight_in, std::optional<double> eps) {
  constexpr const char* op = "rms_norm_forward";
  check_tensor(op, "x", x_in, x_in);
  const Shape s = check_shape(op, x_in, normalized_shape);
  check_params(op, weight_in, std::nullopt, x_in, s);
  if (on_cuda_f64(x_in)) {
    auto [y, rstd] = rms_norm_forward(x_in.cpu(), normalized_shape, to_cpu(weight_in), eps);
    return {y.to(x_in.device()), rstd.to(x_in.device())};
  }
  auto weight = defined(weight_in);
  if (weight) weight = weight->contiguous();
  auto [x, x_stride] = as_rows(x_in, s);

  Tensor y = at::empty(x_in.sizes(), x_in.options().memory_format(at::MemoryFormat::Contiguous));
  Tensor rstd = at::empty(stats_shape(x_in, s), x_in.options().dtype(stats_dtype(x_in)));
  if (s.rows == 0) return {y, rstd};
  if (empty_normalized_rows(s)) {
    fill_empty_row_stats(nullptr, rstd);
    return {y, rstd};
  }

  Exec exec;
  make_exec(exec, op, x_in, "auto");
  normkit::RmsNormForwardArgs args;
  args.x = const_rows(op, "x", x, x_stride, s);
  args.weight = opt_vec(op, "weight", weight);
  args.eps = eps ? *eps : normkit_torch::default_rms_eps(x_in.scalar_type());
  args.y = rows_of(op, "y", y, s);
  args.rstd = vec_of(op, "rstd", rstd);
  translate_errors([&] { normkit::rms_norm_forward(args, exec.config); });
  return {y, rstd};
}

std::tuple<OptTensor, OptTensor> rms_norm_backward(const Tensor& dy_in, const Tensor& x_in, at::IntArrayRef normalized_shape,
                                             const Tensor& rstd_in, const std::optional<Tensor>& weight_in,
                                             std::array<bool, 2> output_mask, std::string_view strategy) {
  constexpr const char* op = "rms_norm_backward";
  check_tensor(op, "x", x_in, x_in);
  const Shape s = check_shape(op, x_in, normalized_shape);
  check_grad_out(op, dy_in, x_in);
  check_stats(op, "rstd", rstd_in, x_in, s);
  check_params(op, weight_in, std::nullopt, x_in, s);
  if (on_cuda_f64(x_in)) {
    auto [dx, dw] = rms_norm_backward(dy_in.cpu(), x_in.cpu(), normalized_shape, rstd_in.cpu(), to_cpu(weight_in),
                                      output_mask, strategy);
    const auto d = x_in.device();
    return {opt_to(dx, d), opt_to(dw, d)};
  }
  const auto weight = defined(weight_in);
  const Tensor weight_c = weight ? weight->contiguous() : Tensor();
  auto [x, x_stride] = as_rows(x_in, s);
  auto [dy, dy_stride] = as_rows(dy_in, s);
  const Tensor rstd = rstd_in.contiguous();

  Tensor dx, dweight;
  if (output_mask[0]) dx = at::empty(x_in.sizes(), x_in.options().memory_format(at::MemoryFormat::Contiguous));
  if (output_mask[1] && weight) dweight = at::empty(s.normalized, weight->options());

  Exec exec;
  make_exec(exec, op, x_in, strategy);
  if (s.rows == 0) {
    if (dweight.defined()) dweight.zero_();
    return {opt(dx), opt(dweight)};
  }
  if (empty_normalized_rows(s)) return {opt(dx), opt(dweight)};  // no elements to write
  if (!dx.defined() && !dweight.defined()) return {opt(dx), opt(dweight)};

  normkit::RmsNormBackwardArgs args;
  args.dy = const_rows(op, "grad_out", dy, dy_stride, s);
  args.x = const_rows(op, "x", x, x_stride, s);
  args.rstd = const_vec(op, "rstd", rstd);
  if (weight) args.weight = const_vec(op, "weight", weight_c);
  if (dx.defined()) args.dx = rows_of(op, "dx", dx, s);
  if (dweight.defined()) args.dweight = vec_of(op, "dweight", dweight);

  translate_errors([&] {
    if (exec.config.device == normkit::Device::Cpu) {
      normkit::rms_norm_backward(args, exec.config, normkit::Workspace{});
      return;
    }
    const std::size_t bytes = normkit::rms_norm_backward_workspace_size(args, exec.config);
    Tensor ws = bytes ? at::empty({static_cast<int64_t>(bytes)}, x_in.options().dtype(at::kByte)) : Tensor();
    normkit::rms_norm_backward(args, exec.config, normkit::Workspace{bytes ? ws.data_ptr() : nullptr, bytes});
  });
  return {opt(dx), opt(dweight)};
}

// ---------------------------------------------------------------------------------------------
// planner queries (no tensors)
// ---------------------------------------------------------------------------------------------

normkit::DType scalar_to_dtype(const char* name, c10::ScalarType t) {
  switch (t) {
    case at::kFloat: return normkit::DType::F32;
    case at::kHalf: return normkit::DType::F16;
    case at::kBFloat16: return normkit::DType::BF16;
    case at::kDouble: return normkit::DType::F64;
    default:
      TORCH_CHECK(false, "normkit.plan_backward: argument '", name, "' is ", t,
                  ", expected float32, float16, bfloat16 or float64");
  }
}

normkit::Problem query_problem(std::string_view op, int64_t M, int64_t N, c10::ScalarType dtype,
                               std::array<bool, 3> mask, std::optional<c10::ScalarType> weight_dtype) {
  normkit::Problem p;
  if (op == "layer_norm") {
    p.op = normkit::Op::LayerNormBackward;
  } else if (op == "rms_norm") {
    p.op = normkit::Op::RmsNormBackward;
  } else {
    TORCH_CHECK(false, "normkit.plan_backward: argument 'op' is \"", op, "\", expected \"layer_norm\" or \"rms_norm\"");
  }
  TORCH_CHECK(M >= 0 && N >= 1, "normkit.plan_backward: arguments 'M' = ", M, " and 'N' = ", N,
              " must satisfy M >= 0 and N >= 1");
  p.rows = M;
  p.cols = N;
  p.dtype = scalar_to_dtype("dtype", dtype);
  p.weight_dtype = weight_dtype ? scalar_to_dtype("weight_dtype", *weight_dtype) : p.dtype;
  p.mask = {mask[0], mask[1], p.op == normkit::Op::RmsNormBackward ? false : mask[2]};
  // The queries describe contiguous rows from torch's allocator (16-byte aligned): their rows are
  // vectorised exactly when a row is a whole number of 16-byte vectors (rows_aligned, problem.cpp).
  // Taken as always aligned, strategy_supported said yes to a forced fused at N = 1025 fp32, which the
  // op then refused.
  p.rows_vector_aligned = N * static_cast<int64_t>(normkit::dtype_size(p.dtype)) % 16 == 0;
  return p;
}

normkit::DeviceFacts query_device() {
  // The current CUDA device when there is one (normkit's own device query, the facts its CUDA
  // layer plans with), else the H200 the defaults were measured on.
#ifdef NORMKIT_WITH_CUDA
  if (at::cuda::is_available()) return normkit::current_device_facts();
#endif
  return normkit::DeviceFacts::h200();
}

std::string plan_backward(std::string_view op, int64_t M, int64_t N, c10::ScalarType dtype, std::array<bool, 3> mask,
                          std::string_view strategy, std::optional<c10::ScalarType> weight_dtype) {
  const normkit::Problem p = query_problem(op, M, N, dtype, mask, weight_dtype);
  return translate_errors([&] {
    return normkit::plan(p, query_device(), normkit::parse_strategy(std::string(strategy))).describe();
  });
}

std::tuple<bool, std::string> strategy_supported(std::string_view op, int64_t M, int64_t N, c10::ScalarType dtype,
                                                 std::array<bool, 3> mask, std::string_view strategy,
                                                 std::optional<c10::ScalarType> weight_dtype) {
  const normkit::Problem p = query_problem(op, M, N, dtype, mask, weight_dtype);
  return translate_errors([&] {
    std::string why;
    const bool ok = normkit::strategy_supported(p, normkit::parse_strategy(std::string(strategy)), &why,
                                                normkit::default_planner_table(query_device()));
    return std::make_tuple(ok, ok ? std::string() : why);
  });
}

}  // namespace

TORCH_LIBRARY(normkit, m) {
  m.def("layer_norm_forward(Tensor x, SymInt[] normalized_shape, Tensor? weight, Tensor? bias, float eps)"
        " -> (Tensor, Tensor, Tensor)");
  m.def("layer_norm_backward(Tensor grad_out, Tensor x, SymInt[] normalized_shape, Tensor mean, Tensor rstd,"
        " Tensor? weight, Tensor? bias, bool[3] output_mask, str strategy=\"auto\") -> (Tensor?, Tensor?, Tensor?)");
  m.def("rms_norm_forward(Tensor x, SymInt[] normalized_shape, Tensor? weight, float? eps) -> (Tensor, Tensor)");
  m.def("rms_norm_backward(Tensor grad_out, Tensor x, SymInt[] normalized_shape, Tensor rstd, Tensor? weight,"
        " bool[2] output_mask, str strategy=\"auto\") -> (Tensor?, Tensor?)");
  m.def("plan_backward(str op, int M, int N, ScalarType dtype, bool[3] mask=[True, True, True],"
        " str strategy=\"auto\", ScalarType? weight_dtype=None) -> str",
        &plan_backward);
  m.def("strategy_supported(str op, int M, int N, ScalarType dtype, bool[3] mask=[True, True, True],"
        " str strategy=\"auto\", ScalarType? weight_dtype=None) -> (bool, str)",
        &strategy_supported);
}

TORCH_LIBRARY_IMPL(normkit, CPU, m) {
  m.impl("layer_norm_forward", &layer_norm_forward);
  m.impl("layer_norm_backward", &layer_norm_backward);
  m.impl("rms_norm_forward", &rms_norm_forward);
  m.impl("rms_norm_backward", &rms_norm_backward);
}

// Registered in every build so that a CPU-only build answers CUDA tensors with its own clear error.
TORCH_LIBRARY_IMPL(normkit, CUDA, m) {
  m.impl("layer_norm_forward", &layer_norm_forward);
  m.impl("layer_norm_backward", &layer_norm_backward);
  m.impl("rms_norm_forward", &rms_norm_forward);
  m.impl("rms_norm_backward", &rms_norm_backward);
}

// ---------------------------------------------------------------------------------------------
// eager entry points of normkit.layer_norm / rms_norm (python/normkit/functional.py)
// ---------------------------------------------------------------------------------------------

// The forward ops through the dispatcher's typed (unboxed) call, returning y: every dispatch key
// still applies (autograd.cpp's autograd, __torch_dispatch__ modes, meta and fake tensors), as it
// does for torch.ops.normkit.*, but without the boxed call from Python, which cost ~1.9 us more per
// call on the CPU machine (2 x 8 CPU tensors: 4.50 against 2.63 us; docs/NOTES.md entry 79).
// functional.py calls these only where no Python-level handling is needed: not under torch.compile
// or export (they trace torch.ops) or a torch.func transform (python/normkit/_functorch.py), and
// without a __torch_function__ override or mode.
Tensor layer_norm_y(const Tensor& x, std::vector<int64_t> normalized_shape, const std::optional<Tensor>& weight,
                    const std::optional<Tensor>& bias, double eps) {
  const auto& op = normkit_torch::layer_norm_forward_op();
  pybind11::gil_scoped_release no_gil;  // as torch's own bindings do around a dispatch
  return std::get<0>(op.call(x, c10::fromIntArrayRefSlow(normalized_shape), weight, bias, eps));
}

Tensor rms_norm_y(const Tensor& x, std::vector<int64_t> normalized_shape, const std::optional<Tensor>& weight,
                  std::optional<double> eps) {
  const auto& op = normkit_torch::rms_norm_forward_op();
  pybind11::gil_scoped_release no_gil;
  return std::get<0>(op.call(x, c10::fromIntArrayRefSlow(normalized_shape), weight, eps));
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) {
  module.doc() = "normkit: LayerNorm/RMSNorm kernels; the operators live in torch.ops.normkit";
  module.def("built_with_cuda", &normkit::built_with_cuda, "Whether this build has the CUDA kernels");
  module.def("cuda_available", &normkit::cuda_available, "Whether normkit's CUDA layer sees a device");
  module.def("_set_backward_strategy", &normkit_torch::set_backward_strategy, pybind11::arg("strategy"),
             "Sets this thread's forced backward strategy (None: none); returns the previous one");
  module.def("_layer_norm", &layer_norm_y, pybind11::arg("x"), pybind11::arg("normalized_shape"),
             pybind11::arg("weight"), pybind11::arg("bias"), pybind11::arg("eps"),
             "y of torch.ops.normkit.layer_norm_forward, dispatched without the boxed call (eager use only)");
  module.def("_rms_norm", &rms_norm_y, pybind11::arg("x"), pybind11::arg("normalized_shape"), pybind11::arg("weight"),
             pybind11::arg("eps"),
             "y of torch.ops.normkit.rms_norm_forward, dispatched without the boxed call (eager use only)");
  module.def("_backward_strategy", &normkit_torch::backward_strategy, "This thread's forced backward strategy, or None");
  module.def("_planner_table",
             [] {  // a bad table file: RuntimeError naming its line, like the ops' errors
               return translate_errors([] { return normkit::planner_table_source(query_device()); });
             },
             "The planner table of the current device (normkit::planner_table_source)");
}
