// Which conformance suites test which op of the op table (rbee/backend/op_table.def).
//
// Next to a suite's INSTANTIATE_TEST_SUITE_P, RBEE_CONFORMANCE_SUITE(Kind, Suite) records that the suite tests
// OpKind::Kind. OpTable.EveryOpHasAConformanceSuite (test_op_table.cpp) fails for an op of the table with no
// suite recorded, and for a recorded suite that has no test cases.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "rbee/backend/op_kinds.h"

namespace rbee::test {

// Records the pair; returns true (it runs in a static initializer).
bool register_op_suite(OpKind op, const char* suite);
// Every pair recorded, per op.
const std::map<OpKind, std::vector<std::string>>& op_suites();

// What is wrong with `suites` (per op) given the gtest suite names that exist and their test counts: one line
// per op without a suite and per named suite with no cases. Parametrized suites match by the name after the
// instantiation prefix ("Ops/SoftmaxConformance" is "SoftmaxConformance").
std::vector<std::string> op_suite_problems(const std::map<OpKind, std::vector<std::string>>& suites,
                                           const std::map<std::string, int>& test_counts);

}  // namespace rbee::test

#define RBEE_CONFORMANCE_SUITE_CAT2(a, b) a##b
#define RBEE_CONFORMANCE_SUITE_CAT(a, b) RBEE_CONFORMANCE_SUITE_CAT2(a, b)
#define RBEE_CONFORMANCE_SUITE(Kind, Suite)                                                  \
  [[maybe_unused]] static const bool RBEE_CONFORMANCE_SUITE_CAT(rbee_op_suite_, __LINE__) = \
      ::rbee::test::register_op_suite(::rbee::OpKind::Kind, #Suite)
