// Package netbed is a test bed of separate hosts on one Linux machine:
// network namespaces joined by a bridge, for the tests of this repository
// that must see a real network (partitions, pauses, crashes, slow links)
// rather than loopback.
//
// New(t, n) creates, as root, a "switch" namespace holding a bridge and n
// host namespaces, each with one veth link (eth0) to the bridge and its own
// address in 10.99.0.0/24 (Host.Addr: 10.99.0.11, .12, ...). Nothing else
// is reachable from a host: traffic between hosts crosses the bridge, never
// loopback. Every namespace, link and process the bed created is removed
// when the test ends, by name and by PID, whether it passed or not;
// namespaces left behind by an earlier run whose process died are removed
// when a bed is created.
//
// What a test can do to the network and the processes on it:
//
//   - Host.Command, Bed.Start: run a program on a host (ip netns exec; the
//     PID is the program's own). Proc.Stop and Proc.Cont pause and resume it
//     (SIGSTOP, SIGCONT), Proc.Kill crashes it (SIGKILL).
//   - Bed.Partition(groups...): split the bridge; each group of hosts gets
//     a bridge of its own, the hosts named in no group stay together. Frames
//     to the other side are dropped silently, as in a real partition (no
//     "connection refused"). Host.Cut isolates one host; Bed.Heal joins
//     everything again.
//   - Host.LinkDown, Host.LinkUp: set the host's link down and up (its
//     peers see unreachable at once).
//   - Host.Listen, Host.Dial: sockets of the test process itself on a host
//     (a thread enters the host's namespace to create them).
//   - Bed.Proxy: a userspace TCP proxy between hosts that delays each
//     direction (the kernel here has no netem): it listens on one host and
//     dials the target from another. UDP is not proxied: memberlist's gossip
//     probes cannot be slowed this way.
//
// Without root (or without ip(8)) New fails the test when the CI
// environment variable is set, and skips it otherwise.
package netbed
