// The public C++ API: a thin layer. Each call is: views -> one internal problem -> validation ->
// planner -> CPU reference or CUDA dispatch. No threshold or launch shape lives here.
#include "normkit/normkit.h"

#include <cstring>

#include "core/problem.h"
#include "cpu/reference.h"
#include "cuda/dispatch.h"

namespace normkit {
namespace {

using detail::BackwardProblem;
using detail::ForwardProblem;

const PlannerTable& table_of(const ExecConfig& config, const DeviceFacts& facts) {
  return config.table != nullptr ? *config.table : default_planner_table(facts);
}

Plan plan_for(const ForwardProblem& p, const ExecConfig& config) {
  const DeviceFacts facts = config.device == Device::Cuda ? detail::cuda_device_facts() : DeviceFacts{};
  return plan(detail::planner_problem(p), facts, Strategy::Auto, table_of(config, facts));
}

Plan plan_for(const BackwardProblem& p, const ExecConfig& config) {
  const DeviceFacts facts = config.device == Device::Cuda ? detail::cuda_device_facts() : DeviceFacts{};
  return plan(detail::planner_problem(p), facts, config.strategy, table_of(config, facts));
}

/// The ExecConfig's own fields, before the views: an unknown device would otherwise skip the checks
/// that depend on it (pointers, f64, row length) and reach the CUDA layer.
void check_config(const char* op, const ExecConfig& config, bool forward) {
  const std::string prefix = std::string("normkit.") + op + ": argument ";
  if (config.device != Device::Cpu && config.device != Device::Cuda)
    throw Error(prefix + "'device' has the unknown code " + std::to_string(int(config.device)) + ", expected Cpu or Cuda");
  // strategy_name's switch is the one list of the strategies: "unknown" for any other code
  if (std::strcmp(strategy_name(config.strategy), "unknown") == 0)
    throw Error(prefix + "'strategy' has the unknown code " + std::to_string(int(config.strategy)));
  // Forward has no gamma/beta strategy: a forced one is meaningless and rejected (on every device).
  if (forward && config.strategy != Strategy::Auto)
    throw Error(prefix + "'strategy' must be auto for forward ops, got " + strategy_name(config.strategy));
}

void validate_call(const ForwardProblem& p, const ExecConfig& config) {
  check_config(op_name(p.rms ? Op::RmsNormForward : Op::LayerNormForward), config, true);
  detail::validate(p, config.device,
                   config.caller_checked_pointers ? detail::PointerQuery::Skip : detail::PointerQuery::Ask);
}
void validate_call(const BackwardProblem& p, const ExecConfig& config) {
  check_config(op_name(p.rms ? Op::RmsNormBackward : Op::LayerNormBackward), config, false);
  detail::validate(p, config.device,
                   config.caller_checked_pointers ? detail::PointerQuery::Skip : detail::PointerQuery::Ask);
  // The CPU reference honours a forced strategy only in that it must be one the planner could serve
  // on the GPU (results never depend on it): the call, its plan and its workspace query refuse alike.
  if (config.device == Device::Cpu && config.strategy != Strategy::Auto) plan_for(p, config);
}

/// The plan query of the public API: the arguments are validated first, as by the call itself.
template <typename Problem>
Plan validated_plan(const Problem& p, const ExecConfig& config) {
  validate_call(p, config);
  return plan_for(p, config);
}

void run_forward(const ForwardProblem& p, const ExecConfig& config) {
  validate_call(p, config);
  if (config.device == Device::Cpu) {
    detail::reference_forward(p);
    return;
  }
  const Plan chosen = plan_for(p, config);
  detail::cuda_forward(p, chosen, config.stream);
}

std::size_t backward_workspace(const BackwardProblem& p, const ExecConfig& config) {
  validate_call(p, config);
  if (config.device == Device::Cpu) return 0;
  return plan_for(p, config).workspace_bytes;
}

void run_backward(const BackwardProblem& p, const ExecConfig& config, Workspace workspace) {
  validate_call(p, config);
  if (config.device == Device::Cpu) {
    detail::reference_backward(p);
    return;
  }
  const Plan chosen = plan_for(p, config);
  if (workspace.bytes < chosen.workspace_bytes)
    throw Error("normkit backward: argument 'workspace' has " + std::to_string(workspace.bytes) +
                " bytes, expected at least " + std::to_string(chosen.workspace_bytes));
  if (chosen.workspace_bytes > 0 && workspace.data == nullptr)
    throw Error("normkit backward: argument 'workspace' is null but " +
                std::to_string(chosen.workspace_bytes) + " bytes are needed");
  if (reinterpret_cast<std::uintptr_t>(workspace.data) % 16 != 0)
    throw Error("normkit backward: argument 'workspace' must be 16-byte aligned");
  detail::cuda_backward(p, chosen, workspace.data, config.stream);
}

void run_backward_allocating(const BackwardProblem& p, const ExecConfig& config) {
  if (config.device == Device::Cpu) {
    run_backward(p, config, {});
    return;
  }
  const std::size_t bytes = backward_workspace(p, config);
  void* data = bytes ? detail::cuda_alloc_async(bytes, config.stream) : nullptr;
  try {
    run_backward(p, config, {data, bytes});
  } catch (...) {
    if (data) detail::cuda_free_async(data, config.stream);
    throw;
  }
  if (data) detail::cuda_free_async(data, config.stream);
}

}  // namespace

void layer_norm_forward(const LayerNormForwardArgs& args, const ExecConfig& config) {
  run_forward(detail::to_problem(args), config);
}
void rms_norm_forward(const RmsNormForwardArgs& args, const ExecConfig& config) {
  run_forward(detail::to_problem(args), config);
}

std::size_t layer_norm_backward_workspace_size(const LayerNormBackwardArgs& args, const ExecConfig& config) {
  return backward_workspace(detail::to_problem(args), config);
}
std::size_t rms_norm_backward_workspace_size(const RmsNormBackwardArgs& args, const ExecConfig& config) {
  return backward_workspace(detail::to_problem(args), config);
}

void layer_norm_backward(const LayerNormBackwardArgs& args, const ExecConfig& config, Workspace workspace) {
  run_backward(detail::to_problem(args), config, workspace);
}
void rms_norm_backward(const RmsNormBackwardArgs& args, const ExecConfig& config, Workspace workspace) {
  run_backward(detail::to_problem(args), config, workspace);
}
void layer_norm_backward(const LayerNormBackwardArgs& args, const ExecConfig& config) {
  run_backward_allocating(detail::to_problem(args), config);
}
void rms_norm_backward(const RmsNormBackwardArgs& args, const ExecConfig& config) {
  run_backward_allocating(detail::to_problem(args), config);
}

Plan plan_layer_norm_backward(const LayerNormBackwardArgs& args, const ExecConfig& config) {
  return validated_plan(detail::to_problem(args), config);
}
Plan plan_rms_norm_backward(const RmsNormBackwardArgs& args, const ExecConfig& config) {
  return validated_plan(detail::to_problem(args), config);
}
Plan plan_layer_norm_forward(const LayerNormForwardArgs& args, const ExecConfig& config) {
  return validated_plan(detail::to_problem(args), config);
}
Plan plan_rms_norm_forward(const RmsNormForwardArgs& args, const ExecConfig& config) {
  return validated_plan(detail::to_problem(args), config);
}

DeviceFacts current_device_facts() { return detail::cuda_device_facts(); }
bool cuda_available() { return detail::cuda_device_present(); }
bool built_with_cuda() {
#ifdef NORMKIT_WITH_CUDA
  return true;
#else
  return false;
#endif
}

}  // namespace normkit
