// Whether a streaming client is still there. cpp-httplib (0.11) hands a handler no socket, and
// a closed peer shows only when a write fails, which for a stream waiting on the next audio
// block can be many decode steps later. So the handler finds its connection's socket (the one
// whose peer is the request's remote address and port, on the server's port) once, and polls it
// while it waits: a peer that closed makes the request cancel within one decode step.
#pragma once
#include <string>

namespace cbx::server {

// The descriptor of this process's TCP socket connected to remote_addr:remote_port whose local
// port is local_port; -1 when there is none (the connection is already gone).
int find_connection_socket(const std::string& remote_addr, int remote_port, int local_port);
// True when the peer of `fd` has closed or reset the connection (data the client pipelined
// is left unread). fd -1: false (unknown, the writes will tell).
bool peer_closed(int fd);

}  // namespace cbx::server
