// Internal: the bits behind RowXhat's exact shift (src/cuda/row_layout.cuh), as constexpr integer math
// that the CUDA kernels and the CPU tests share (tests/cpu/exact_shift_test.cpp checks the property the
// kernels rely on over every fp16 and bf16 value).
//
// The split 16-bit rows form xhat = x * rstd + shift with shift = -fl(mean * rstd) (one FMA an element).
// At x == mean that gives the rounding residual of mean * rstd, not 0, unless the product is exact.
// A mean of at most kExactMeanBits significant bits (every 16-bit value, so a constant row's mean) times
// an rstd of at most 24 - kExactMeanBits significant bits has at most 24 bits: exact in fp32.
#pragma once

#include <cstdint>

namespace normkit::detail {

constexpr int kExactMeanBits = 11;
/// zero in the fp32 bits of a mean of at most kExactMeanBits significant bits (24 - 11 = 13 low bits)
constexpr std::uint32_t kExactMeanLowBits = (1u << (24 - kExactMeanBits)) - 1u;
/// cleared in rstd for such a mean, leaving it 24 - kExactMeanBits significant bits
constexpr std::uint32_t kExactRstdLowBits = (1u << kExactMeanBits) - 1u;

/// The fp32 bits of the rstd that RowXhat scales by: rstd's own, or with its kExactMeanBits low bits
/// cleared where the mean's kExactMeanLowBits are zero. That lowers it by less than 2^-12 of itself.
constexpr std::uint32_t exact_shift_rstd_bits(std::uint32_t mean_bits, std::uint32_t rstd_bits) {
  return rstd_bits & ~((mean_bits & kExactMeanLowBits) == 0u ? kExactRstdLowBits : 0u);
}

}  // namespace normkit::detail
