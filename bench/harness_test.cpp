// normkit-bench's measure_strategies: the order in which strategies are made ready and run, read from a
// backend that logs what it is asked to do (the CPU backend underneath; the timings themselves mean nothing).
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "backend.h"
#include "harness.h"

namespace nkbench {
namespace {

using normkit::DType;
using normkit::Strategy;

/// The CPU backend, with every prepare ("prepare k", k counting from 0) and every run ("run k") logged.
class LoggingBackend final : public Backend {
 public:
  explicit LoggingBackend(std::vector<std::string>* log) : cpu_(make_cpu_backend()), log_(log) {}

  normkit::Device device() const override { return cpu_->device(); }
  CUstream_st* stream() const override { return cpu_->stream(); }
  std::string description() const override { return cpu_->description(); }
  std::string device_name() const override { return cpu_->device_name(); }
  std::int64_t l2_bytes() const override { return cpu_->l2_bytes(); }
  std::size_t free_memory() const override { return cpu_->free_memory(); }
  normkit::DeviceFacts planner_facts() const override { return cpu_->planner_facts(); }
  void* alloc(std::size_t bytes) override { return cpu_->alloc(bytes); }
  void release(void* ptr) override { cpu_->release(ptr); }
  void fill_normal(void* ptr, DType dtype, std::int64_t count, std::uint64_t seed) override {
    cpu_->fill_normal(ptr, dtype, count, seed);
  }
  void synchronize() override { cpu_->synchronize(); }
  double copy_bandwidth(std::size_t bytes, int repeats, std::size_t* used_bytes) override {
    return cpu_->copy_bandwidth(bytes, repeats, used_bytes);
  }
  std::unique_ptr<TimedRuns> prepare_stream(const Call& call, int warmup, int iters) override {
    const std::string id = std::to_string(prepared_++);
    log_->push_back("prepare " + id);
    return std::make_unique<Logged>(cpu_->prepare_stream(call, warmup, iters), log_, "run " + id);
  }
  std::unique_ptr<TimedRuns> prepare_graph(const Call& call, int warmup, int calls) override {
    return cpu_->prepare_graph(call, warmup, calls);  // throws: no graphs on the CPU
  }
  bool graphs_supported() const override { return cpu_->graphs_supported(); }
  double time_once(const Call& call, std::int64_t index) override { return cpu_->time_once(call, index); }

 private:
  class Logged final : public TimedRuns {
   public:
    Logged(std::unique_ptr<TimedRuns> inner, std::vector<std::string>* log, std::string entry)
        : inner_(std::move(inner)), log_(log), entry_(std::move(entry)) {}
    double run() override {
      log_->push_back(entry_);
      return inner_->run();
    }

   private:
    std::unique_ptr<TimedRuns> inner_;
    std::vector<std::string>* log_;
    std::string entry_;
  };

  std::unique_ptr<Backend> cpu_;
  std::vector<std::string>* log_;
  int prepared_ = 0;
};

class MeasureStrategies : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    setup_ = nkbench::Setup::create(backend_, /*rms=*/false, 8, 64, DType::F32, DType::F32, RotationPolicy{}, &why);
    ASSERT_TRUE(setup_) << why;
    params_.warmup = 0;
    params_.iters = 1;
    params_.runs = 4;
  }
  std::vector<Timing> measure(OpKind op, const std::vector<Strategy>& strategies) {
    return measure_strategies(backend_, *setup_, op, strategies, TimingMode::Events, params_);
  }

  std::vector<std::string> log_;
  LoggingBackend backend_{&log_};
  std::unique_ptr<nkbench::Setup> setup_;
  TimingParams params_;
};

TEST_F(MeasureStrategies, InterleavedRunsTakeTurnsFromADifferentStrategyEachRound) {
  const std::vector<Timing> t = measure(OpKind::LnGb, {Strategy::Simple, Strategy::Tiled, Strategy::Auto});
  const std::vector<std::string> expected = {
      "prepare 0", "prepare 1", "prepare 2",  // every strategy ready before the first timed run
      "run 0",     "run 1",     "run 2",      // round 0: up the list
      "run 1",     "run 0",     "run 2",      // round 1 starts one strategy later, down the list
      "run 2",     "run 0",     "run 1",      // round 2: up, wrapping around
      "run 0",     "run 2",     "run 1"};     // round 3: down
  EXPECT_EQ(log_, expected);
  ASSERT_EQ(t.size(), 3u);
  for (const Timing& one : t) {
    EXPECT_TRUE(one.ok) << one.error;
    EXPECT_EQ(one.runs_us.size(), 4u);
    EXPECT_FALSE(one.plan.empty());
    EXPECT_LE(one.wall_start_ms, one.wall_end_ms);
  }
  EXPECT_NE(t[0].plan, t[1].plan);  // the results are each strategy's, in the order asked
}

TEST(RoundTurn, EveryVariantLeadsARoundAndFollowsBothNeighbours) {
  for (std::size_t count : {1u, 2u, 3u, 5u}) {
    std::vector<std::vector<bool>> follows(count, std::vector<bool>(count, false));  // [variant][predecessor]
    for (int r = 0; r < int(2 * count); ++r) {
      std::vector<int> seen(count, 0);
      for (std::size_t j = 0; j < count; ++j) {
        const std::size_t k = round_turn(r, j, count);
        ASSERT_LT(k, count);
        ++seen[k];
        if (j == 0) EXPECT_EQ(k, std::size_t(r) % count) << "round " << r << " of " << count;
        else follows[k][round_turn(r, j - 1, count)] = true;
      }
      for (int n : seen) EXPECT_EQ(n, 1) << "round " << r << " of " << count << " runs every variant once";
    }
    if (count < 3) continue;
    for (std::size_t k = 0; k < count; ++k) {
      EXPECT_TRUE(follows[k][(k + count - 1) % count]) << k << " of " << count << " after its lower neighbour";
      EXPECT_TRUE(follows[k][(k + 1) % count]) << k << " of " << count << " after its upper neighbour";
    }
  }
}

TEST_F(MeasureStrategies, SequentialMeasuresEachStrategyWhole) {
  params_.interleave = false;
  params_.runs = 2;
  const std::vector<Timing> t = measure(OpKind::LnGb, {Strategy::Tiled, Strategy::TwoPass});
  const std::vector<std::string> expected = {"prepare 0", "run 0", "run 0", "prepare 1", "run 1", "run 1"};
  EXPECT_EQ(log_, expected);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_TRUE(t[0].ok && t[1].ok);
}

TEST_F(MeasureStrategies, AStrategyThatCannotServeTheOpIsLeftOutOfTheTurns) {
  // Forward ops have no gamma/beta strategy: a forced one is unsupported, never prepared or run.
  params_.runs = 2;
  const std::vector<Timing> t = measure(OpKind::LnFwd, {Strategy::Tiled, Strategy::Auto});
  const std::vector<std::string> expected = {"prepare 0", "run 0", "run 0"};
  EXPECT_EQ(log_, expected);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_TRUE(t[0].unsupported);
  EXPECT_FALSE(t[0].ok);
  EXPECT_TRUE(t[1].ok) << t[1].error;
  EXPECT_EQ(t[1].runs_us.size(), 2u);
}

TEST_F(MeasureStrategies, VariantsRunUnderTheirOwnTablesSideBySide) {
  // The tuner's two-way steps: one strategy under two planner tables, measured in turns.
  normkit::PlannerTable no_simple = normkit::default_planner_table(), simple = no_simple;
  no_simple.simple_max_rows = 0;
  simple.simple_max_rows = 16;
  params_.runs = 2;
  const std::vector<Timing> t = measure_variants(backend_, *setup_, OpKind::LnGb,
                                                 {{Strategy::Auto, &no_simple}, {Strategy::Auto, &simple}},
                                                 TimingMode::Events, params_);
  const std::vector<std::string> expected = {"prepare 0", "prepare 1", "run 0", "run 1", "run 1", "run 0"};
  EXPECT_EQ(log_, expected);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_TRUE(t[0].ok && t[1].ok);
  EXPECT_EQ(t[0].plan.rfind("simple", 0), std::string::npos) << t[0].plan;
  EXPECT_EQ(t[1].plan.rfind("simple", 0), 0u) << t[1].plan;
}

TEST_F(MeasureStrategies, GraphModeWithoutADeviceIsAnErrorForEveryStrategy) {
  const std::vector<Timing> t =
      measure_strategies(backend_, *setup_, OpKind::LnGb, {Strategy::Tiled, Strategy::Auto}, TimingMode::Graph, params_);
  EXPECT_TRUE(log_.empty());
  for (const Timing& one : t) {
    EXPECT_FALSE(one.ok);
    EXPECT_NE(one.error.find("graph mode needs a CUDA device"), std::string::npos) << one.error;
  }
}

// The plan a result row names is the plan the call runs: rows whose length is not a whole number of
// 16-byte vectors are planned scalar for the forward as for the backward (before 75c369c the forward
// was planned as if every row were 16-byte aligned), and plan_with_table agrees.
TEST(SetupPlan, OddRowsArePlannedScalarForEveryOp) {
  std::unique_ptr<Backend> backend = make_cpu_backend();
  for (const std::int64_t cols : {std::int64_t(4097), std::int64_t(4096)}) {
    const int vec = cols % 8 == 0 ? 8 : 1;  // bf16: 8 elements a 16-byte vector
    for (const bool rms : {false, true}) {
      std::string why;
      const auto setup = Setup::create(*backend, rms, 16, cols, DType::BF16, DType::BF16, RotationPolicy{}, &why);
      ASSERT_TRUE(setup) << why;
      const OpKind fwd = rms ? OpKind::RmsFwd : OpKind::LnFwd, bwd = rms ? OpKind::RmsBwd : OpKind::LnBwd;
      for (const OpKind op : {fwd, bwd}) {
        const std::string where = std::string(op_kind_name(op)) + " N = " + std::to_string(cols);
        const normkit::Plan plan = setup->plan(op, Strategy::Auto);
        EXPECT_EQ(plan.row.vec, vec) << where << ": " << plan.describe();
        const normkit::Plan with_table = setup->plan_with_table(op, Strategy::Auto, normkit::PlannerTable{});
        EXPECT_EQ(with_table.row.vec, vec) << where << ": " << with_table.describe();
      }
    }
  }
}

}  // namespace
}  // namespace nkbench
