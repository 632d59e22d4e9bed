// Autograd of torch.ops.normkit.layer_norm_forward / rms_norm_forward, in C++.
//
// Why C++: the same formulas registered from Python (torch.library.register_autograd) cost about
// 110 us of host time per forward + backward pair (CPU, 4 x 8 tensors: normkit 168 us, F.layer_norm
// 56 us), which showed up in the end-to-end check as BART-base bf16 training at 0.83x of torch's
// steps/s (32 norms per step, host-bound at ~24 steps/s; docs/NOTES.md).
//
// Semantics kept from the Python registration:
//   * the backward op gets output_mask from needs_input_grad (x, weight, bias);
//   * the gamma/beta strategy is the one forced on the thread running the backward, else the one
//     forced when the forward ran (autograd runs CUDA backwards on its own device thread);
//   * a forward with nothing to record (grad mode off, or no input requiring grad) calls the op below
//     autograd directly, without a Function context;
//   * without create_graph the backward op runs below autograd (no graph to build, no extra dispatch).
// Added here: a create_graph backward (gradient penalties, Hessian-vector products) returns gradients
// that can be differentiated again, from the forward recomputed with differentiable ATen ops
// (recomputed_grads); the backward ops themselves still have no derivative (python/normkit/_ops.py).
#include <torch/autograd.h>
#include <torch/extension.h>
#include <torch/library.h>


#include <array>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "backward_strategy.h"
#include "op_handles.h"

namespace normkit_torch {

namespace {
thread_local std::optional<std::string> forced_strategy;
}  // namespace

std::optional<std::string> set_backward_strategy(std::optional<std::string> strategy) {
  std::optional<std::string> previous = std::move(forced_strategy);
  forced_strategy = std::move(strategy);
  return previous;
}

std::optional<std::string> backward_strategy() { return forced_strategy; }

}  // namespace normkit_torch

namespace {

using at::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

using Shape = c10::SymIntArrayRef;

// What a forward keeps for its backward besides the saved tensors: the count of normalized dims (the
// shape is x's last ones), eps (for recomputed_grads) and the strategy forced when it ran, if any.
// Nothing else goes into saved_data: each entry is a map insert with a string key, and weight / bias
// presence is the saved tensors' own (an undefined tensor saves as undefined). Host time of forward +
// backward at 2 x 8 CPU tensors: docs/NOTES.md entry 79.
void save_forward_facts(AutogradContext* ctx, Shape normalized_shape, double eps) {
  ctx->saved_data["dims"] = static_cast<int64_t>(normalized_shape.size());
  ctx->saved_data["eps"] = eps;
  if (auto forced = normkit_torch::backward_strategy()) ctx->saved_data["strategy"] = *forced;
}

/// The norm's row terms from differentiable ATen ops, in float32 for 16-bit x as normkit's kernels compute:
/// the ground both derivatives beyond the kernels stand on (recomputed_grads, set_norm_tangent).
struct CompositeRows {
  bool narrow;                // x is 16-bit: the terms are float32
  std::vector<int64_t> axes;  // the normalized dims
  Tensor rstd, xhat;

  CompositeRows(bool rms, const Tensor& x, int64_t dims, double eps)
      : narrow(x.scalar_type() == at::kHalf || x.scalar_type() == at::kBFloat16) {
    for (int64_t d = x.dim() - dims; d < x.dim(); ++d) axes.push_back(d);
    const Tensor xf = wide(x);
    const Tensor centred = rms ? xf : xf - xf.mean(axes, /*keepdim=*/true);
    rstd = at::rsqrt(centred.square().mean(axes, /*keepdim=*/true) + eps);
    xhat = centred * rstd;
  }
  Tensor wide(const Tensor& t) const { return narrow ? t.to(at::kFloat) : t; }
};

/// A create_graph backward's gradients, which can be differentiated again. normkit's backward ops have no
/// derivative of their own, so the forward is recomputed from the saved x, weight and bias with
/// differentiable ATen ops -- in float32 for 16-bit x, as normkit's kernels compute, the output cast to
/// x's dtype -- and its gradients taken with create_graph (a nested torch::autograd::grad, as activation
/// checkpointing does). Slower than the kernels; only create_graph backwards (gradient penalties,
/// Hessian-vector products, MAML) take it. Returns the gradients of x, weight and bias where `wanted`.
std::array<Tensor, 3> recomputed_grads(bool rms, const Tensor& grad_y, const Tensor& x, int64_t dims,
                                       const Tensor& weight, const Tensor& bias, double eps,
                                       std::array<bool, 3> wanted) {
  const CompositeRows rows(rms, x, dims, eps);
  Tensor y = rows.xhat;
  if (weight.defined()) y = y * rows.wide(weight);
  if (bias.defined()) y = y + rows.wide(bias);
  y = y.to(x.scalar_type());
  std::vector<Tensor> inputs;
  const Tensor* const candidates[3] = {&x, &weight, &bias};
  for (int i = 0; i < 3; ++i)
    if (wanted[i]) inputs.push_back(*candidates[i]);
  const variable_list grads =
      torch::autograd::grad({y}, inputs, {grad_y}, /*retain_graph=*/true, /*create_graph=*/true);
  std::array<Tensor, 3> out;
  for (int i = 0, next = 0; i < 3; ++i)
    if (wanted[i]) out[i] = grads[next++];
  return out;
}

/// The normalized shape of the forward whose input was `x`.
Shape normalized_shape_of(AutogradContext* ctx, const Tensor& x) {
  const auto dims = static_cast<size_t>(ctx->saved_data.at("dims").toInt());
  const auto sizes = x.sym_sizes();
  return sizes.slice(sizes.size() - dims);
}

/// The strategy forced on this thread, else the one forced when the forward ran, else "auto".
std::string strategy_for_backward(AutogradContext* ctx) {
  if (auto current = normkit_torch::backward_strategy()) return *current;
  const auto at_forward = ctx->saved_data.find("strategy");
  return at_forward != ctx->saved_data.end() ? at_forward->second.toStringRef() : std::string("auto");
}

std::optional<Tensor> present(const Tensor& t) { return t.defined() ? std::optional<Tensor>(t) : std::nullopt; }
Tensor or_undefined(const std::optional<Tensor>& t) { return t ? *t : Tensor(); }
bool has(const std::optional<Tensor>& t) { return t.has_value() && t->defined(); }

/// A tensor as save_for_backward may keep it: a tensor made under torch.inference_mode cannot be
/// saved, so such an input is saved as a copy. F.rms_norm on the CPU differentiates through ATen ops
/// that save x * rstd rather than x, so an inference-mode x with a weight that requires grad works
/// there; normkit saves x (its backward ops take x), and without the copy it raised instead.
/// (F.layer_norm raises in that case; normkit serves it too.)
Tensor saveable(const Tensor& t) { return t.defined() && t.is_inference() ? t.clone() : t; }

/// Forward-mode AD (torch.autograd.forward_ad): whether `t` carries a tangent at the default level, and
/// `t` without it.
bool has_tangent(const Tensor& t) { return t.defined() && t._fw_grad(/*level=*/0).defined(); }
bool has_tangent(const std::optional<Tensor>& t) { return t && has_tangent(*t); }
std::optional<Tensor> primal(const std::optional<Tensor>& t) {
  if (!has_tangent(t)) return t;
  return t->_fw_primal(/*level=*/0);
}

/// A backward whose incoming gradient carries a tangent (forward-mode AD over the backward, e.g. a
/// Hessian-vector product by forward-over-reverse): the backward ops have no forward derivative, so the
/// tangent would be dropped silently; refuse instead.
void refuse_tangent(const Tensor& grad_y) {
  TORCH_CHECK(!has_tangent(grad_y), "normkit: forward-mode AD over the backward (forward-over-reverse) is not "
              "supported: the backward ops have no forward derivative. Use reverse-over-reverse (create_graph=True) "
              "or a torch.nn.functional norm.");
}

/// The statistics of a forward run inside Function::apply, handed back through this out-parameter (an
/// argument that is not a tensor: apply passes it through) rather than as outputs of the Function. As
/// outputs they would have to be marked non-differentiable, and CppNode's compiled-autograd path
/// (`compiled_args`, torch 2.11) asserts that no output is: an eager forward whose backward ran under
/// compiled autograd failed with "ctx_.non_differentiable_.empty() INTERNAL ASSERT FAILED". Computed
/// below autograd, they come back as plain tensors that do not require grad, as before.
struct ForwardStats {
  Tensor mean, rstd;
};

class LayerNormFunction : public torch::autograd::Function<LayerNormFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const Tensor& x, Shape normalized_shape,
                               const std::optional<Tensor>& weight, const std::optional<Tensor>& bias, double eps,
                               ForwardStats* stats) {
    at::AutoDispatchBelowADInplaceOrView guard;
    auto [y, mean, rstd] = normkit_torch::layer_norm_forward_op().call(x, normalized_shape, weight, bias, eps);
    ctx->save_for_backward({saveable(x), saveable(or_undefined(weight)), saveable(or_undefined(bias)), mean, rstd});
    save_forward_facts(ctx, normalized_shape, eps);
    // An undefined gradient of y stays undefined (backward returns none) instead of a zero tensor.
    ctx->set_materialize_grads(false);
    stats->mean = mean;
    stats->rstd = rstd;
    return {y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto& op = normkit_torch::layer_norm_backward_op();
    const variable_list saved = ctx->get_saved_variables();
    const bool has_weight = saved[1].defined(), has_bias = saved[2].defined();
    // Edges exist for the tensors that were passed: x, then weight and bias when present.
    const std::array<bool, 3> mask = {ctx->needs_input_grad(0), has_weight && ctx->needs_input_grad(1),
                                      has_bias && ctx->needs_input_grad(has_weight ? 2 : 1)};
    const Tensor& grad_y = grads[0];
    if (!grad_y.defined() || !(mask[0] || mask[1] || mask[2]))
      return {Tensor(), Tensor(), Tensor(), Tensor(), Tensor(), Tensor()};
    refuse_tangent(grad_y);
    if (at::GradMode::is_enabled()) {  // create_graph
      const auto g = recomputed_grads(false, grad_y, saved[0], ctx->saved_data.at("dims").toInt(), saved[1], saved[2],
                                      ctx->saved_data.at("eps").toDouble(), mask);
      return {g[0], Tensor(), g[1], g[2], Tensor(), Tensor()};
    }
    const std::string strategy = strategy_for_backward(ctx);
    at::AutoDispatchBelowADInplaceOrView guard;
    auto [dx, dweight, dbias] = op.call(grad_y, saved[0], normalized_shape_of(ctx, saved[0]), saved[3], saved[4],
                                        present(saved[1]), present(saved[2]), mask, strategy);
    return {or_undefined(dx), Tensor(), or_undefined(dweight), or_undefined(dbias), Tensor(), Tensor()};
  }
};

class RmsNormFunction : public torch::autograd::Function<RmsNormFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const Tensor& x, Shape normalized_shape,
                               const std::optional<Tensor>& weight, std::optional<double> eps, ForwardStats* stats) {
    at::AutoDispatchBelowADInplaceOrView guard;
    auto [y, rstd] = normkit_torch::rms_norm_forward_op().call(x, normalized_shape, weight, eps);
    ctx->save_for_backward({saveable(x), saveable(or_undefined(weight)), rstd});
    save_forward_facts(ctx, normalized_shape, eps.value_or(normkit_torch::default_rms_eps(x.scalar_type())));
    ctx->set_materialize_grads(false);  // as in LayerNormFunction
    stats->rstd = rstd;
    return {y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto& op = normkit_torch::rms_norm_backward_op();
    const variable_list saved = ctx->get_saved_variables();
    const bool has_weight = saved[1].defined();
    const std::array<bool, 2> mask = {ctx->needs_input_grad(0), has_weight && ctx->needs_input_grad(1)};
    const Tensor& grad_y = grads[0];
    if (!grad_y.defined() || !(mask[0] || mask[1])) return {Tensor(), Tensor(), Tensor(), Tensor(), Tensor()};
    refuse_tangent(grad_y);
    if (at::GradMode::is_enabled()) {  // create_graph
      const auto g = recomputed_grads(true, grad_y, saved[0], ctx->saved_data.at("dims").toInt(), saved[1], Tensor(),
                                      ctx->saved_data.at("eps").toDouble(), {mask[0], mask[1], false});
      return {g[0], Tensor(), g[1], Tensor(), Tensor()};
    }
    const std::string strategy = strategy_for_backward(ctx);
    at::AutoDispatchBelowADInplaceOrView guard;
    auto [dx, dweight] = op.call(grad_y, saved[0], normalized_shape_of(ctx, saved[0]), saved[2], present(saved[1]),
                                 mask, strategy);
    return {or_undefined(dx), Tensor(), or_undefined(dweight), Tensor(), Tensor()};
  }
};

/// Whether a forward has anything to record: grad mode on and an input that requires grad. When not
/// (inference, torch.no_grad, frozen norms), the op runs below autograd directly: Function::apply
/// would still build its context (saved tensors, the saved_data entries) for nothing.
bool records_graph(const Tensor& x, std::initializer_list<const std::optional<Tensor>*> params) {
  if (!at::GradMode::is_enabled()) return false;
  if (x.requires_grad()) return true;
  for (const std::optional<Tensor>* p : params)
    if (has(*p) && (*p)->requires_grad()) return true;
  return false;
}

std::tuple<Tensor, Tensor, Tensor> layer_norm_forward_recorded(const Tensor& x, Shape normalized_shape,
                                                               const std::optional<Tensor>& weight,
                                                               const std::optional<Tensor>& bias, double eps) {
  if (!records_graph(x, {&weight, &bias})) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return normkit_torch::layer_norm_forward_op().call(x, normalized_shape, weight, bias, eps);
  }
  ForwardStats stats;
  const variable_list out = LayerNormFunction::apply(x, normalized_shape, weight, bias, eps, &stats);
  return {out[0], std::move(stats.mean), std::move(stats.rstd)};
}

std::tuple<Tensor, Tensor> rms_norm_forward_recorded(const Tensor& x, Shape normalized_shape,
                                                     const std::optional<Tensor>& weight, std::optional<double> eps) {
  if (!records_graph(x, {&weight})) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return normkit_torch::rms_norm_forward_op().call(x, normalized_shape, weight, eps);
  }
  ForwardStats stats;
  const variable_list out = RmsNormFunction::apply(x, normalized_shape, weight, eps, &stats);
  return {out[0], std::move(stats.rstd)};
}

// ---- forward-mode AD (torch.autograd.forward_ad) ----
// The ops have no forward derivative of their own, and a forward whose inputs carried tangents returned
// y without one: a JVP came out silently zero. Now the op runs on the primals and y gets its tangent
// from ATen ops (in float32 for 16-bit x, as the kernels compute):
//   t_xhat = rstd * (t_x - mean(t_x) - xhat * mean(xhat * t_x))   (RMSNorm: no mean(t_x) term)
//   t_y    = t_xhat * w + xhat * t_w + t_b,
// with the row's mean and rstd recomputed by ATen ops too, so that the tangent is a differentiable
// function of x (a gradient of a JVP, reverse-over-forward, needs how mean and rstd move with x; the
// op's statistics are constants to autograd). mean and rstd get no tangent (not differentiable outputs).
void set_norm_tangent(bool rms, const Tensor& y, const Tensor& x, int64_t dims, const std::optional<Tensor>& weight,
                      const std::optional<Tensor>& bias, double eps) {
  const CompositeRows rows(rms, primal(x).value(), dims, eps);
  Tensor t_y = at::zeros_like(rows.xhat);
  if (has_tangent(x)) {
    const Tensor t_x = rows.wide(x._fw_grad(0));
    Tensor t_xhat = t_x - rows.xhat * (rows.xhat * t_x).mean(rows.axes, /*keepdim=*/true);
    if (!rms) t_xhat = t_xhat - t_x.mean(rows.axes, /*keepdim=*/true);
    t_xhat = t_xhat * rows.rstd;
    t_y = t_y + (has(weight) ? t_xhat * rows.wide(primal(weight).value()) : t_xhat);
  }
  if (has_tangent(weight)) t_y = t_y + rows.xhat * rows.wide(weight->_fw_grad(0));
  if (has_tangent(bias)) t_y = t_y + rows.wide(bias->_fw_grad(0));
  y._set_fw_grad(t_y.to(y.scalar_type()), /*level=*/0, /*is_inplace_op=*/false);
}

std::tuple<Tensor, Tensor, Tensor> layer_norm_forward_autograd(const Tensor& x, Shape normalized_shape,
                                                               const std::optional<Tensor>& weight,
                                                               const std::optional<Tensor>& bias, double eps) {
  if (!(has_tangent(x) || has_tangent(weight) || has_tangent(bias)))
    return layer_norm_forward_recorded(x, normalized_shape, weight, bias, eps);
  auto out = layer_norm_forward_recorded(primal(x).value(), normalized_shape, primal(weight), primal(bias), eps);
  set_norm_tangent(false, std::get<0>(out), x, static_cast<int64_t>(normalized_shape.size()), weight, bias, eps);
  return out;
}

std::tuple<Tensor, Tensor> rms_norm_forward_autograd(const Tensor& x, Shape normalized_shape,
                                                     const std::optional<Tensor>& weight, std::optional<double> eps) {
  if (!(has_tangent(x) || has_tangent(weight))) return rms_norm_forward_recorded(x, normalized_shape, weight, eps);
  auto out = rms_norm_forward_recorded(primal(x).value(), normalized_shape, primal(weight), eps);
  set_norm_tangent(true, std::get<0>(out), x, static_cast<int64_t>(normalized_shape.size()), weight, std::nullopt,
                   eps.value_or(normkit_torch::default_rms_eps(x.scalar_type())));
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(normkit, Autograd, m) {
  m.impl("layer_norm_forward", &layer_norm_forward_autograd);
  m.impl("rms_norm_forward", &rms_norm_forward_autograd);
}
