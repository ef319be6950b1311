#include "server/peer_watch.h"

#include <dirent.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cstdlib>
#include <string>

namespace rbee::server {

namespace {

struct Endpoint {
  std::string host;
  int port = -1;
};

// The numeric host and the port of a socket address, written the way cpp-httplib writes Request::remote_addr.
bool endpoint_of(const sockaddr_storage& addr, socklen_t len, Endpoint& out) {
  char host[NI_MAXHOST];
  char port[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, host, sizeof host, port, sizeof port,
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return false;
  }
  out.host = host;
  out.port = std::atoi(port);
  return true;
}

bool is_connection_of(int fd, const httplib::Request& req) {
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) return false;
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  Endpoint local, remote;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0 || !endpoint_of(addr, len, local)) return false;
  if (local.port != req.local_port) return false;
  len = sizeof addr;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0 || !endpoint_of(addr, len, remote)) return false;
  return remote.port == req.remote_port && remote.host == req.remote_addr;
}

}  // namespace

PeerWatch::PeerWatch(const httplib::Request& req) {
  if (req.remote_port < 0 || req.local_port < 0) return;
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return;
  while (const dirent* entry = readdir(dir)) {
    if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
    const int fd = std::atoi(entry->d_name);
    if (fd == dirfd(dir)) continue;
    if (is_connection_of(fd, req)) {
      fd_ = fd;
      break;
    }
  }
  closedir(dir);
}

bool PeerWatch::peer_closed() const {
  if (fd_ < 0) return false;
  pollfd p{fd_, POLLIN | POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return true;
  if (p.revents & POLLIN) {
    char byte;
    return recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0;  // 0: orderly shutdown by the peer
  }
  return false;
}

}  // namespace rbee::server
