// `rbee bench` as a user runs it: the built binary (RBEE_CLI) with bad arguments must exit non-zero with a
// message that names the bad option or value, never crash; a good run must print the JSON fields that
// tools/bench/compare_llamacpp.py reads. The model is the tiny Llama of tests/data/tiny_models (fast to load).
#include <cstdio>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_run.h"

namespace {

using rbee::test::CliRun;

const std::string kTinyModel = std::string(RBEE_SOURCE_DIR) + "/tests/data/tiny_models/llama/model.gguf";

// Runs `rbee bench -m <model> <args>` and collects stdout, and stderr too unless `stdout_only` (the logs go to
// stderr, the results to stdout).
CliRun bench(const std::string& args, const std::string& model = kTinyModel, bool stdout_only = false) {
  const std::string cmd = std::string(RBEE_CLI) + " bench -m " + model + " " + args +
                          (stdout_only ? " 2>/dev/null" : " 2>&1");
  return rbee::test::run_command(cmd);
}

// Fails unless the command exited with an error (not a crash) whose output contains `needle`.
void expect_refused(const std::string& args, const std::string& needle) {
  const CliRun r = bench(args);
  EXPECT_GT(r.status, 0) << "rbee bench " << args << " was not refused:\n" << r.output;
  EXPECT_NE(r.output.find(needle), std::string::npos) << "rbee bench " << args << ": no '" << needle << "' in\n"
                                                      << r.output;
}

TEST(BenchCli, RefusesNonPositiveRepetitions) {
  expect_refused("-r 0", "--repetitions");
  expect_refused("-r -2", "--repetitions");
}

TEST(BenchCli, RefusesNegativeLengths) {
  expect_refused("-p -3", "--n-prompt values must be >= 0, got -3");
  expect_refused("-p 16 -n 8,-1", "--n-gen values must be >= 0, got -1");
}

TEST(BenchCli, RefusesLengthsThatAreNotNumbers) { expect_refused("-p abc", "--n-prompt"); }

TEST(BenchCli, RefusesNothingToMeasure) { expect_refused("-p 0 -n 0", "nothing to measure"); }

TEST(BenchCli, RefusesATestLongerThanTheCache) {
  // The tiny Llama's context is 2048 positions.
  expect_refused("-p 5000 -n 0 --no-limits", "a test needs 5000 positions");
}

TEST(BenchCli, RefusesBadLimitMeasurements) {
  expect_refused("--gemm-n 8", "--gemm-n must be in [16, 16384], got 8");
  expect_refused("--bandwidth-mib 0", "--bandwidth-mib must be in [1, 65536], got 0");
}

TEST(BenchCli, RefusesUnknownBackendAndMissingModel) {
  expect_refused("--backend tpu", "--backend");
  const CliRun r = bench("", std::string(RBEE_SOURCE_DIR) + "/no/such/model.gguf");
  EXPECT_GT(r.status, 0);
  EXPECT_NE(r.output.find("does not exist"), std::string::npos) << r.output;
}

TEST(BenchCli, JsonRunHasEveryField) {
  const CliRun r = bench("-p 16 -n 4 -r 2 -t 1 --json --bandwidth-mib 1 --gemm-n 32", kTinyModel, true);
  ASSERT_EQ(r.status, 0) << r.output;
  const size_t start = r.output.find('[');
  ASSERT_NE(start, std::string::npos) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output.substr(start));
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[0]["test"], "pp16");
  EXPECT_EQ(j[1]["test"], "tg4");
  for (const auto& e : j) {
    EXPECT_EQ(e["n_threads"], 1);
    EXPECT_EQ(e["repetitions"], 2);
    EXPECT_EQ(e["samples_ts"].size(), 2u);
    EXPECT_GT(e["avg_ts"].get<double>(), 0.0);
    EXPECT_GE(e["stddev_ts"].get<double>(), 0.0);
    EXPECT_GT(e["limit_ts"].get<double>(), 0.0);
    EXPECT_GT(e["fraction_of_limit"].get<double>(), 0.0);
    EXPECT_GT(e["gemm_flops_per_s"].get<double>(), 0.0);
    EXPECT_GT(e["copy_bytes_per_s"].get<double>(), 0.0);
  }
  EXPECT_EQ(j[0]["limit"], "gemm");
  EXPECT_EQ(j[1]["limit"], "memory_bandwidth");
  // pp16 of the tiny Llama (hidden 48, ffn 96, 2 layers, q 4x16, kv 2x16, vocab 320), counted independently:
  // per layer 48*64 + 2*48*32 + 64*48 + 3*48*96 = 23040 weights; 2*16*23040*2 + 2*48*320 + 4*64*(16*17/2)*2.
  EXPECT_DOUBLE_EQ(j[0]["flops_per_pass"].get<double>(), 2.0 * 16 * 23040 * 2 + 2.0 * 48 * 320 + 4.0 * 64 * 136 * 2);
}

TEST(BenchCli, RefusesBadBatchedRuns) {
  expect_refused("--batch 0 -p 8 -n 4", "--batch values must be in [1, 4096], got 0");
  expect_refused("--batch 2 -p 8,16 -n 4", "give one --n-prompt and one --n-gen");
  expect_refused("--batch 2 -p 8 -n 0", "needs --n-prompt >= 1 and --n-gen >= 1");
}

// --batch: N jobs through the scheduler; every job must finish with exactly n_gen + 1 tokens (the run refuses
// otherwise), and the JSON must carry llama-batched-bench's fields with consistent speeds.
TEST(BenchCli, BatchedJsonRunHasEveryField) {
  const CliRun r = bench("-p 8 -n 4 -r 1 -t 1 --batch 1,3 --json", kTinyModel, true);
  ASSERT_EQ(r.status, 0) << r.output;
  const size_t start = r.output.find('[');
  ASSERT_NE(start, std::string::npos) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output.substr(start));
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[0]["pl"], 1);
  EXPECT_EQ(j[1]["pl"], 3);
  for (const auto& e : j) {
    const int pl = e["pl"].get<int>();
    EXPECT_EQ(e["pp"], 8);
    EXPECT_EQ(e["tg"], 4);
    EXPECT_EQ(e["n_kv"], pl * 12);
    const double t_pp = e["t_pp"].get<double>(), t_tg = e["t_tg"].get<double>();
    ASSERT_GT(t_pp, 0.0);
    ASSERT_GT(t_tg, 0.0);
    EXPECT_NEAR(e["speed_pp"].get<double>(), pl * 8 / t_pp, 1e-6 * pl * 8 / t_pp);
    EXPECT_NEAR(e["speed_tg"].get<double>(), pl * 4 / t_tg, 1e-6 * pl * 4 / t_tg);
    EXPECT_NEAR(e["speed"].get<double>(), pl * 12 / (t_pp + t_tg), 1e-6 * pl * 12 / (t_pp + t_tg));
    EXPECT_EQ(e["decode_graphs"], false);  // the CPU has no graphs
    EXPECT_EQ(e["graph_replays"], 0);
  }
}

}  // namespace
