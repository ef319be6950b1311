// Names of the ops and their functions, from the op table.
#include "rbee/backend/op_kinds.h"

namespace rbee {

const char* op_kind_name(OpKind op) {
  switch (op) {
#define RBEE_OP(Kind, rule, backends, method, params) \
  case OpKind::Kind: return #method;
#include "rbee/backend/op_table.def"
  }
  return "unknown";
}

const char* unary_op_name(UnaryOp op) {
  switch (op) {
#define RBEE_UNARY_OP(Kind, name) \
  case UnaryOp::Kind: return #name;
#include "rbee/backend/op_table.def"
  }
  return "unknown";
}

const char* binary_op_name(BinaryOp op) {
  switch (op) {
#define RBEE_BINARY_OP(Kind, name) \
  case BinaryOp::Kind: return #name;
#include "rbee/backend/op_table.def"
  }
  return "unknown";
}

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
#define RBEE_REDUCE_OP(Kind, name) \
  case ReduceOp::Kind: return #name;
#include "rbee/backend/op_table.def"
  }
  return "unknown";
}

}  // namespace rbee
