// The seed PR's 13 benchmark cases (tile8_small ... rms_two_pass) with their exact shapes:
// gamma/beta backward, full backward and forward vs the float64 reference, and every strategy
// forced on every case. Inputs, device copies and the reference of each case are built once per
// process (cached_case) and shared by the suites below.
#include "harness.h"

namespace normkit::gputest {
namespace {

using DT = DType;

std::vector<Spec> seed_specs() {
  return {
      ln_spec("tile8_small", 32, 512, DT::F16),
      ln_spec("tile64_medium", 96, 768, DT::F16),
      ln_spec("tile128_medium", 192, 1024, DT::BF16),
      ln_spec("tile256_large", 4096, 1024, DT::F16),
      ln_spec("tile256_bert", 1024, 768, DT::F16),
      ln_spec("tile256_large_bf16", 4096, 1024, DT::BF16),
      ln_spec("tile256_large_fp32", 4096, 1024, DT::F32),
      ln_spec("two_pass_huge_M", 131072, 64, DT::F16),
      ln_spec("llm_hidden_4096", 32 * 4096, 4096, DT::BF16),  // x (32, 4096, 4096)
      ln_spec("gpt2_style", 8 * 1024, 768, DT::F16),          // x (8, 1024, 768)
      rms_spec("rms_tile256", 4096, 1024, DT::F16),
      rms_spec("rms_llm", 32 * 4096, 4096, DT::BF16),
      rms_spec("rms_two_pass", 131072, 64, DT::F16),
  };
}

class SeedCase : public testing::TestWithParam<Spec> {};

// test_layer_norm_gamma_beta_backward_matches_cpu_reference / test_rms_norm_gamma_backward_matches_cpu_reference:
// output mask dweight+dbias only (RMSNorm: dweight), auto strategy, allocating overload on the
// legacy default stream.
TEST_P(SeedCase, GammaBetaBackwardMatchesReference) {
  Bundle& b = cached_case(GetParam());
  const Mask mask{false, true, !GetParam().rms};
  EXPECT_TRUE(check_backward(*b.host, b.dev, b.backward_ref(), mask, Strategy::Auto, /*stream=*/nullptr,
                             WsMode::Convenience));
}

// Full backward (dx + dweight + dbias), auto strategy, explicit poisoned workspace, non-blocking stream.
TEST_P(SeedCase, FullBackwardMatchesReference) {
  Bundle& b = cached_case(GetParam());
  EXPECT_TRUE(check_backward(*b.host, b.dev, b.backward_ref(), GetParam().full_mask(), Strategy::Auto));
}

// Forward: y, mean, rstd.
TEST_P(SeedCase, ForwardMatchesReference) {
  Bundle& b = cached_case(GetParam());
  check_forward(*b.host, b.dev, reference_forward(*b.host));
}

INSTANTIATE_TEST_SUITE_P(Seed, SeedCase, testing::ValuesIn(seed_specs()), spec_name);

// Every strategy forced on every seed case (Simple included on the 131072-row cases): the
// reference result when strategy_supported() says it can serve the shape, normkit::Error (and no
// output written) when it says it cannot. Both the full mask and the gamma/beta-only mask.
using SeedStrategyParam = std::tuple<Spec, Strategy>;
class SeedStrategy : public testing::TestWithParam<SeedStrategyParam> {};

TEST_P(SeedStrategy, ForcedStrategyMatchesReference) {
  const Spec& spec = std::get<0>(GetParam());
  const Strategy strategy = std::get<1>(GetParam());
  Bundle& b = cached_case(spec);
  const RefBackward& ref = b.backward_ref();
  check_backward(*b.host, b.dev, ref, spec.full_mask(), strategy);
  check_backward(*b.host, b.dev, ref, Mask{false, true, !spec.rms}, strategy);
}

INSTANTIATE_TEST_SUITE_P(Seed, SeedStrategy,
                         testing::Combine(testing::ValuesIn(seed_specs()), testing::ValuesIn(all_strategies())),
                         [](const testing::TestParamInfo<SeedStrategyParam>& info) {
                           return std::get<0>(info.param).name + "_" + strategy_id(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace normkit::gputest
