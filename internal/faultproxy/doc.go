// Package faultproxy is a fault-injecting TCP proxy for tests: put a [Proxy]
// in front of one Redis node (or any TCP server) and point the client at
// [Proxy.Addr] instead of the server.
//
// While running, the proxy can:
//
//   - delay every byte by a fixed one-way latency in each direction
//     ([Proxy.SetLatency]);
//   - blackhole the link: bytes in both directions are silently dropped and
//     connections hang ([Proxy.Blackhole]);
//   - reset every open connection ([Proxy.ResetAll]);
//   - refuse new connections ([Proxy.RefuseNew]).
//
// Every accepted connection is forwarded over its own new connection to the
// target, so a target that restarts on the same address (for example a
// redistest.Server after Kill and Restart) is picked up by the next client
// connection without any action on the proxy. If the target cannot be
// reached, the accepted connection is reset.
//
// All goroutines (one accept loop, up to four per connection) belong to
// the Proxy; Close waits for all of them.
package faultproxy
