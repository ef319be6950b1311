// PeerWatch: tells a request handler whether its client has hung up, while the handler is still working on the
// response (a non-streaming completion that runs for seconds). cpp-httplib 0.11 gives handlers no access to the
// connection, so PeerWatch finds the connection's socket among the process's descriptors by the request's
// addresses (local port, remote address and port identify one TCP connection) and later polls it without reading.
// The descriptor stays valid for the handler's life: the connection thread running the handler owns it.
#pragma once

#include <httplib.h>

namespace rbee::server {

class PeerWatch {
 public:
  explicit PeerWatch(const httplib::Request& req);
  // True once the client has closed its side or the connection has failed. A client that sends more data
  // (a pipelined request) counts as connected. Always false when the socket was not found.
  bool peer_closed() const;
  bool found() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

}  // namespace rbee::server
