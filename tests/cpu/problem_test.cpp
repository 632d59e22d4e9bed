// The internal problem layer: public args -> problem, and the planner's view of it (op, mask,
// weight dtype, and when rows may be read with 16-byte vectors). Pointers here are never
// dereferenced, so fixed addresses stand in for buffers.
#include <gtest/gtest.h>

#include <cstdint>

#include "core/problem.h"

namespace normkit::detail {
namespace {

void* address(std::uintptr_t a) { return reinterpret_cast<void*>(a); }

constexpr std::int64_t kM = 4, kN = 1024;

LayerNormBackwardArgs aligned_f16_backward() {
  LayerNormBackwardArgs a;
  a.dy = {address(0x10000), DType::F16, kM, kN};
  a.x = {address(0x20000), DType::F16, kM, kN};
  a.mean = {address(0x30000), DType::F32, kM};
  a.rstd = {address(0x30100), DType::F32, kM};
  a.weight = ConstVec{address(0x40000), DType::F32, kN};
  a.dx = Rows{address(0x50000), DType::F16, kM, kN};
  a.dweight = Vec{address(0x60000), DType::F32, kN};
  a.dbias = Vec{address(0x70000), DType::F32, kN};
  return a;
}

TEST(PlannerProblem, BackwardCarriesShapeDtypesAndMask) {
  LayerNormBackwardArgs a = aligned_f16_backward();
  a.dweight.reset();
  const Problem p = planner_problem(to_problem(a));
  EXPECT_EQ(p.op, Op::LayerNormBackward);
  EXPECT_EQ(p.rows, kM);
  EXPECT_EQ(p.cols, kN);
  EXPECT_EQ(p.dtype, DType::F16);
  EXPECT_EQ(p.weight_dtype, DType::F32);
  EXPECT_TRUE(p.mask.dx);
  EXPECT_FALSE(p.mask.dweight);
  EXPECT_TRUE(p.mask.dbias);
  EXPECT_TRUE(p.rows_vector_aligned);

  RmsNormBackwardArgs r{a.dy, a.x, a.rstd, std::nullopt, std::nullopt, Vec{address(0x60000), DType::BF16, kN}};
  r.dy.dtype = r.x.dtype = DType::BF16;
  const BackwardProblem rms = to_problem(r);
  EXPECT_TRUE(rms.rms);
  EXPECT_FALSE(rms.mean.has_value());
  EXPECT_FALSE(rms.dbias.has_value());
  const Problem q = planner_problem(rms);
  EXPECT_EQ(q.op, Op::RmsNormBackward);
  EXPECT_EQ(q.weight_dtype, DType::BF16);  // from dweight: no weight given
  EXPECT_FALSE(q.mask.dx);
  EXPECT_TRUE(q.mask.dweight);
  EXPECT_FALSE(q.mask.dbias);
}

TEST(PlannerProblem, WeightDtypeFallsBackToActivations) {
  LayerNormBackwardArgs a = aligned_f16_backward();
  a.weight.reset();
  a.dweight.reset();
  a.dbias.reset();
  EXPECT_EQ(to_problem(a).weight_dtype(), DType::F16);
  a.dbias = Vec{address(0x70000), DType::F32, kN};
  EXPECT_EQ(to_problem(a).weight_dtype(), DType::F32);
}

TEST(PlannerProblem, VectorAlignmentNeedsEveryRowOn16Bytes) {
  EXPECT_TRUE(planner_problem(to_problem(aligned_f16_backward())).rows_vector_aligned);
  {
    LayerNormBackwardArgs a = aligned_f16_backward();
    a.x.data = address(0x20002);  // base pointer off by one element
    EXPECT_FALSE(planner_problem(to_problem(a)).rows_vector_aligned);
  }
  {
    LayerNormBackwardArgs a = aligned_f16_backward();
    a.dy.row_stride = kN + 1;  // rows after the first start at odd offsets
    EXPECT_FALSE(planner_problem(to_problem(a)).rows_vector_aligned);
  }
  {
    LayerNormBackwardArgs a = aligned_f16_backward();
    a.dx->row_stride = kN + 8;  // 16 bytes of padding per f16 row: still aligned
    EXPECT_TRUE(planner_problem(to_problem(a)).rows_vector_aligned);
    a.dx->data = address(0x50008);
    EXPECT_FALSE(planner_problem(to_problem(a)).rows_vector_aligned);
    a.dx.reset();  // an absent dx does not count
    EXPECT_TRUE(planner_problem(to_problem(a)).rows_vector_aligned);
  }
  {
    LayerNormBackwardArgs a = aligned_f16_backward();
    a.dy.cols = a.x.cols = a.dx->cols = 1020;  // 2040 bytes: the row tail is not a whole vector
    EXPECT_FALSE(planner_problem(to_problem(a)).rows_vector_aligned);
  }
}

TEST(PlannerProblem, Forward) {
  LayerNormForwardArgs a;
  a.x = {address(0x1000), DType::BF16, kM, kN};
  a.bias = ConstVec{address(0x2000), DType::F32, kN};
  a.y = {address(0x3000), DType::BF16, kM, kN};
  a.mean = {address(0x4000), DType::F32, kM};
  a.rstd = {address(0x5000), DType::F32, kM};
  a.eps = 1e-3;
  const ForwardProblem fp = to_problem(a);
  EXPECT_FALSE(fp.rms);
  EXPECT_TRUE(fp.mean.has_value());
  EXPECT_EQ(fp.eps, 1e-3);
  Problem p = planner_problem(fp);
  EXPECT_EQ(p.op, Op::LayerNormForward);
  EXPECT_EQ(p.dtype, DType::BF16);
  EXPECT_EQ(p.weight_dtype, DType::F32);  // from the bias: no weight given
  EXPECT_TRUE(p.rows_vector_aligned);
  a.y.row_stride = kN + 4;  // 8 bytes of padding
  EXPECT_FALSE(planner_problem(to_problem(a)).rows_vector_aligned);

  RmsNormForwardArgs r{a.x, std::nullopt, 1e-6, a.y, a.rstd};
  const ForwardProblem rp = to_problem(r);
  EXPECT_TRUE(rp.rms);
  EXPECT_FALSE(rp.mean.has_value());
  EXPECT_FALSE(rp.bias.has_value());
  p = planner_problem(rp);
  EXPECT_EQ(p.op, Op::RmsNormForward);
  EXPECT_EQ(p.weight_dtype, DType::BF16);
}

}  // namespace
}  // namespace normkit::detail
