// FunctionRef: a non-owning, non-allocating reference to a callable (like C++26 std::function_ref).
// The callable must outlive the FunctionRef; used for hot callbacks such as ThreadPool tasks.
#pragma once

#include <type_traits>
#include <utility>

namespace rbee {

template <class Sig> class FunctionRef;

template <class R, class... Args>
class FunctionRef<R(Args...)> {
 public:
  template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, FunctionRef>>>
  FunctionRef(F&& f) noexcept  // NOLINT: implicit on purpose
      : obj_((void*)std::addressof(f)), call_([](void* o, Args... a) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(o))(std::forward<Args>(a)...);
        }) {}
  R operator()(Args... a) const { return call_(obj_, std::forward<Args>(a)...); }

 private:
  void* obj_;
  R (*call_)(void*, Args...);
};

}  // namespace rbee
