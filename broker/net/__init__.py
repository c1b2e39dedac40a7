"""The network layer shared by both protocols: listeners, the TCP server, one connection's
frames in and replies out, flow control, sendfile, TLS, and the connection and memory limits."""
