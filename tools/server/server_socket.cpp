#include "server_socket.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cstdlib>
#include <cstring>

namespace cbx::server {

namespace {
// The address and port of a sockaddr (IPv4 or IPv6, IPv4-mapped shown as plain IPv4).
bool endpoint(const sockaddr_storage& ss, std::string& addr, int& port) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    ::inet_ntop(AF_INET, &a->sin_addr, buf, sizeof buf);
    port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    ::inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof buf);
    port = ntohs(a->sin6_port);
    if (std::strncmp(buf, "::ffff:", 7) == 0) std::memmove(buf, buf + 7, std::strlen(buf + 7) + 1);
  } else {
    return false;
  }
  addr = buf;
  return true;
}
}  // namespace

int find_connection_socket(const std::string& remote_addr, int remote_port, int local_port) {
  DIR* d = ::opendir("/proc/self/fd");
  if (!d) return -1;
  int found = -1;
  while (dirent* e = ::readdir(d)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end) continue;
    struct stat st;
    if (::fstat(int(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    sockaddr_storage peer{}, self{};
    socklen_t lp = sizeof peer, ls = sizeof self;
    if (::getpeername(int(fd), reinterpret_cast<sockaddr*>(&peer), &lp) != 0) continue;
    if (::getsockname(int(fd), reinterpret_cast<sockaddr*>(&self), &ls) != 0) continue;
    std::string pa, sa;
    int pp = 0, sp = 0;
    if (!endpoint(peer, pa, pp) || !endpoint(self, sa, sp)) continue;
    if (pp == remote_port && sp == local_port && pa == remote_addr) {
      found = int(fd);
      break;
    }
  }
  ::closedir(d);
  return found;
}

bool peer_closed(int fd) {
  if (fd < 0) return false;
  pollfd p{fd, short(POLLIN | POLLRDHUP), 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return true;
  if (p.revents & POLLIN) {
    char c;
    const ssize_t n = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0;
  }
  return false;
}

}  // namespace cbx::server
