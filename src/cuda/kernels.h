// Internal: the launchers of each strategy, one .cu file each, called by dispatch.cu with the
// activation type T (float, __half, __nv_bfloat16) and the weight type W (T or float). Each
// launcher takes the validated problem and the plan and launches exactly what the plan says.
#pragma once

#include <cuda_runtime.h>

#include "core/problem.h"

namespace normkit::cuda {

using detail::BackwardProblem;
using detail::ForwardProblem;

/// forward.cu: y (+ mean) + rstd, one row group per row.
template <typename T, typename W>
void launch_forward(const ForwardProblem& p, const Plan& plan, cudaStream_t stream);

/// forward_block_rows.cu: the same, one row a block (RowShape::block_rows).
template <typename T, typename W>
void launch_forward_block_rows(const ForwardProblem& p, const Plan& plan, cudaStream_t stream);

/// backward_dx.cu: dx only, one row group per row.
template <typename T, typename W>
void launch_backward_dx(const BackwardProblem& p, const Plan& plan, cudaStream_t stream);

/// gamma_beta_simple.cu / _tiled.cu / _two_pass.cu: dweight and/or dbias. `programmatic`: launched
/// to overlap the dX kernel just launched before it (common.cuh, programmatic dependent launch).
template <typename T, typename W>
void launch_gamma_beta_simple(const BackwardProblem& p, const Plan& plan, bool programmatic, cudaStream_t stream);
template <typename T, typename W>
void launch_gamma_beta_tiled(const BackwardProblem& p, const Plan& plan, bool programmatic, cudaStream_t stream);
/// gamma_beta_tiled.cu: dX and tiled gamma/beta as the blocks of one launch (Plan::one_launch).
template <typename T, typename W>
void launch_dx_and_tiled(const BackwardProblem& p, const Plan& plan, cudaStream_t stream);
template <typename T, typename W>
void launch_gamma_beta_two_pass(const BackwardProblem& p, const Plan& plan, float* partials, bool programmatic,
                                cudaStream_t stream);

/// fused_backward.cu: dx and dweight/dbias in one cooperative launch (partials + grid-wide reduce).
template <typename T, typename W>
void launch_fused_backward(const BackwardProblem& p, const Plan& plan, float* partials, cudaStream_t stream);

}  // namespace normkit::cuda

// Every launcher is instantiated for these (T, W) pairs.
#define NORMKIT_FOR_EACH_TYPE_PAIR(X) \
  X(float, float)                     \
  X(__half, __half)                   \
  X(__half, float)                    \
  X(__nv_bfloat16, __nv_bfloat16)     \
  X(__nv_bfloat16, float)
