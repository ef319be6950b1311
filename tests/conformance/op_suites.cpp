#include "conformance/op_suites.h"

namespace rbee::test {

namespace {
std::map<OpKind, std::vector<std::string>>& registry() {
  static std::map<OpKind, std::vector<std::string>> suites;
  return suites;
}
}  // namespace

bool register_op_suite(OpKind op, const char* suite) {
  registry()[op].emplace_back(suite);
  return true;
}

const std::map<OpKind, std::vector<std::string>>& op_suites() { return registry(); }

std::vector<std::string> op_suite_problems(const std::map<OpKind, std::vector<std::string>>& suites,
                                           const std::map<std::string, int>& test_counts) {
  std::vector<std::string> problems;
  for (int i = 0; i < kOpKindCount; ++i) {
    const OpKind op = (OpKind)i;
    const auto it = suites.find(op);
    if (it == suites.end() || it->second.empty()) {
      problems.push_back(std::string("op '") + op_kind_name(op) +
                         "' has no conformance suite (RBEE_CONFORMANCE_SUITE in tests/conformance/)");
      continue;
    }
    for (const std::string& suite : it->second) {
      int cases = 0;
      for (const auto& [name, count] : test_counts) {
        const size_t slash = name.rfind('/');
        if ((slash == std::string::npos ? name : name.substr(slash + 1)) == suite) cases += count;
      }
      if (cases == 0) {
        problems.push_back(std::string("op '") + op_kind_name(op) + "': conformance suite '" + suite +
                           "' has no test cases");
      }
    }
  }
  return problems;
}

}  // namespace rbee::test
