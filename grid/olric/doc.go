// Package olric embeds an Olric member (github.com/olric-data/olric) in each
// process of an application cluster and runs bucketgrid requests on the
// member that owns the bucket, in one hop: the entry processor Olric does
// not have.
//
// Start a Member in every process and hand it to bucketgrid.NewManager. A
// request for a key goes to the key's owner, found in Olric's partition table
// (partition = xxhash64(DMap+key) % PartitionCount, owner = the last primary
// owner of that partition), over the member's own owner channel: one
// connection from each member to each other one, many requests in flight on
// each, requests and answers written in batches (a caller yields the
// processor once before it writes, so that the callers already runnable add
// their requests to the same write; an owner answers everything it read in
// one write). When the calling member
// owns the key the request runs in place, without any network. The owner
// runs wire.Process under a per-key lock with its own wall clock, against
// the bucket stored in Olric (it keeps a copy of what it last wrote, since
// it is the only writer, and reads Olric only on a miss; a member that never
// heard of another one, and whose copies dropped nothing, wrote every
// bucket Olric holds and so creates a new one without reading Olric:
// TestFirstTouchAlone), writes the new
// state to Olric only when it changed, with the TTL the request's
// expiration policy computed, and answers. A member that receives a request
// for a key it does not own answers "not owner"; the caller re-reads the
// routing table and tries again. Olric stores, replicates, expires and
// moves the buckets.
//
// # Ports and security
//
// A member listens on three ports of BindAddr:
//
//   - BindPort: Olric's own protocol (RESP): routing tables, bucket writes
//     to replicas, reads of moved partitions, Olric's pub/sub. With channel
//     security on, other members reach it only through the owner channel
//     (below), so only the member's own host needs it; without, every
//     other member dials it.
//   - BindPort+1: the owner channel: bucket requests and answers, the
//     proofs of membership, and Olric's traffic between members.
//   - MemberlistBindPort, BindPort+2 by default: gossip (memberlist, TCP
//     and UDP): membership and failure detection. Peers names these ports.
//
// # Trust
//
// The cluster CA is the one root of trust, and membership one sentence: a
// member is the holder of a certificate from the cluster CA that names the
// host it speaks for, proven on the connection it speaks on. README.md's
// "Trust model" lists, for each secret or file, what its holder alone can
// still do, with the test that shows it.
//
// The cluster CA comes from Config.TLS, from the PEM files TLSCertFile,
// TLSKeyFile and TLSCAFile, or from ChannelSecret. The PEM files are the
// production path: the operator's CA issues each member a certificate
// naming its host, as cert-manager does in Kubernetes (its tls.crt, tls.key
// and ca.crt), and the member re-reads the files four times a HealInterval,
// so a renewed certificate, key or CA (the files swapped at once through
// the ..data link) is used from the next connection on, without a restart,
// and a replacement that does not parse is logged to LogOutput and the
// files in use stay in use (TestCertFilesReload). This is what operators
// know from Consul and etcd (certificate files reloaded in place) and
// CockroachDB (a certificate directory re-read while running).
// ChannelSecret is the development mode: whoever holds the secret is the
// CA.
//
// Revocation: Config.RevokedFile, re-read like the PEM files, lists
// certificates by serial number (as `openssl x509 -serial` prints it) or
// SHA-256 fingerprint, one a line, with # comments (TestParseRevocations):
// the role a CRL plays elsewhere. With a certificate listed on every
// member, every handshake with its holder fails at both ends (owner
// channel, tunnel, identity question), the connections it opened are
// closed, and no member sends it gossip or takes any in from its gossip
// address (a joining state sync that lists it alive is refused too), so
// gossip declares it dead after its failure detection (see "Crash
// fail-over window"), Olric drops it and its partitions move to the
// others, whose checks stay exact and available meanwhile, on the
// partitions Olric re-spreads between them at the leave too
// (TestRevokedExpelled). Its own process keeps running, outside the
// cluster; the deaths of the others it declares there reach nobody
// (TestRevokedGossipIgnored: before, they did, and the accused member's
// partitions moved away and back). It still holds the gossip key, and
// from another address can do what README.md's "Trust model" says a
// holder of GossipKeys can: rotate them (below) to take that away.
//
// A node is a member only once it proved a certificate of
// that CA naming its BindAddr: memberlist's Alive and Merge delegates
// refuse every gossip record until the member that received it dialled the
// node's owner channel (its name's port + 1), the node completed mutual TLS
// 1.3 there with such a certificate, and it said over that connection that
// the record (Olric's metadata, Birthdate included, and its gossip address)
// is its own. Until then no member dials it, sends it the password, gives
// it partitions or counts its Birthdate for the coordinator. A record
// replayed from another gossip address is refused: the node names its own;
// so is metadata whose member name is not the node's. The node's answer
// carries a proof made with Password that covers the TLS session's
// exported keying material (RFC 8446 §7.5), the asker's and the answerer's
// names, the asker's nonce and the answer itself: an answer obtained on one
// connection is worthless on another, so a node without the password
// cannot pass a member's answer off as its own. A member answers only an
// asker whose certificate names the host it says it is.
//
// A running member logs the gossip it refuses because the node's proof
// failed, to LogOutput: "gossip of node N from A refused, unverified:",
// then why ("proof failed:" and the error, or "certificate revoked:" and
// the error). It logs at most one line per gossip address a minute and at
// most 16 such lines a minute in all, so a holder of the gossip key cannot
// flood the log; the next line logged says how many were suppressed.
//
// Around that root, each port has its own defence:
//
//   - The owner channel runs mutual TLS 1.3: both ends present a
//     certificate of the cluster CA, the dialled end's naming the host
//     dialled, the dialling end's naming the address it connects from (as
//     an IP address, or a DNS name resolving to it; members dial from
//     BindAddr), and a connection that does not is closed before a request,
//     a tunnelled byte or an identity question is read. Failed handshakes
//     are bounded per source address: 16, then one a second; beyond,
//     connections from that address are closed at once, unless a member
//     completed a verified handshake from it within the last hour (an
//     attacker sharing that address then gets handshakes too, as many at
//     once as the handshaking limit below allows): TestDoorsThrottle,
//     TestDoorsVerifiedSource.
//   - Olric's traffic between members travels through the owner channel:
//     Olric's client dials another member's owner channel (mutual TLS, then
//     a tunnel preamble), which forwards to its own Olric port and nowhere
//     else, for a peer whose certificate names the address it connects
//     from. Olric v0.7.4
//     has no TLS on its listener and no hook to give it one, so BindPort
//     itself still accepts anyone who reaches it, guarded by Password alone
//     (and Olric does not limit AUTH attempts): let only the member's host
//     reach it.
//   - Gossip is encrypted and authenticated with memberlist's AES-GCM
//     keyring (GossipKeys); a node without the key cannot take part, and
//     one with the key but without a certificate never joins (what it can
//     still do is in README.md's "Trust model"). Keys rotate without
//     downtime: AddGossipKey(new) on every member, then UseGossipKey(new)
//     on every member, then RemoveGossipKey(old) on every member.
//   - Password is Olric's AUTH, defence in depth behind TLS.
//
// A member whose BindAddr or MemberlistBindAddr is not a loopback address
// refuses to start (ErrInsecure) unless all three are configured or
// Config.Insecure is set; DefaultLocalConfig (loopback only) needs none.
// ChannelSecret and gossip keys must be random bytes and Password 20
// characters or more (ErrWeakSecret). A member whose channel TLS or
// Password differs from its cluster's does not join: Start fails at once
// with ErrJoin and ErrSecurityMismatch naming the setting; one whose
// GossipKeys differ, which gossip cannot let in, fails the same way two
// seconds after its gossip started when its peers use the default ports
// (the owner channel one below the gossip port), else with ErrJoin after
// JoinTimeout (see "Joining").
//
// No address an outsider can write decides where requests go: the owner of
// a key is a member name in Olric's routing table, which only proven
// members write, and its owner channel is at that name's host, port + 1.
// An answer comes only from a peer that completed the TLS handshake with a
// certificate of the cluster CA naming that host.
//
// The owner channel limits what a peer, authenticated or not, can cost a
// member: ChannelMaxConns established connections, a quarter as many (at
// least 16) handshaking, of which the oldest silent one is dropped for a
// newer one; ChannelIOTimeout for a handshake, for the rest of a frame
// once its header arrived and for each flush of answers; ChannelIdleTimeout
// for a connection that sends nothing; frames of at most 64 KiB, whose
// buffers grow only as their bytes arrive; at most 256 KiB of a caller's
// frames waiting to be written. A failed Accept (too many open files) is
// retried after a pause of up to a second, as net/http does. Each request
// carries the time its caller still waits; the owner drops one that ran out
// before its turn, and bounds its Olric calls by its routing lease.
//
// # Joining
//
// Peers are gossip addresses of running members. A member given Peers or
// Discover never forms a new cluster: until a peer proved itself to it,
// Start waits, and if none did within JoinTimeout it fails with ErrJoin and
// the last refusal (for a certificate of another CA: "certificate signed by
// unknown authority"; TestChannelSecretMistake, TestJoinFailures); if the
// peers answer Olric's protocol (given BindPort instead of the gossip port)
// it fails at once, with ErrJoin and ErrNotGossipPort. A member's own
// gossip address in Peers is ignored, so every member may be given the same
// list: members started within JoinTimeout of each other find each other
// and form one cluster (TestStartTogether). Only a member with no peers
// configured (or itself as the only peer) starts a cluster.
//
// Config.Discover finds peers where they are published rather than listed:
// cmd/bucketgrid's -grid-peers dns:NAME resolves NAME (a Kubernetes
// headless service) every time it is asked. Start joins what it returns
// together with Peers, and a member that joins again asks it anew.
//
// # Keys
//
// A member holds keys of up to MaxKeyLen bytes (see MaxKeyLen for why). A
// longer key is the client's error (see Member.Execute), never retried,
// never an outage. To limit longer client keys, map them with
// core.FitKey(key, MaxKeyLen). Errors and logs of this package never
// contain a key.
//
// The DMap holding the buckets belongs to this package: writing to it by
// other means breaks the owner's copy. The application may use the embedded
// Olric for anything else (see Member.Olric).
//
// # Contract
//
// With stable membership every request on a key runs on one member, under
// one lock, with one clock, so each bucket is exact and linearizable: no
// token is minted or lost, and clients never disagree about the time.
//
// When members join or leave, ownership moves, and two members must never
// execute the same key at once. Every member re-reads Olric's routing table
// (until two reads agree: see "Lost state") every RoutingRefresh, on
// every Olric cluster event and on every not-owner answer; it executes a
// key only while its newest read that says it owns the key started less
// than RoutingLease ago. A member that becomes owner of a
// partition holds the partition's requests (callers wait and retry) for
// HandoverGrace after the read that told it so. Since HandoverGrace >
// RoutingLease, the old owner has stopped before the new one starts; the
// difference is the margin for a slow execution in flight. The new owner
// then reads the bucket from Olric, which merges the previous owner's copy.
// The price is availability: for HandoverGrace after a change, requests for
// the moved partitions wait, and an owner that cannot read the routing table
// for RoutingLease stops executing until it can.
//
// What a membership change may cost, as measured by the tests of this
// package (3 members, 300 buckets drawn down, load running):
//
//   - A member joins: nothing. Buckets keep their state on their new owner;
//     measured over-admission 0 (TestJoinUnderLoad).
//   - Members restart one after another with ReplicaCount 2: nothing,
//     however soon the next is stopped, as long as Shutdown's context
//     gives it the time to wait (TestNetRollingRestartReady, the next
//     stopped as soon as the restarted one's Start returned, as a
//     StatefulSet's rolling update goes on once the restarted pod is
//     ready: 0 of 50 idle buckets lost in 6 runs; before the wait, 30-50
//     of 50 in 3). A graceful Shutdown first waits, still serving, until it and
//     every other owner of its routing table vouch for their partitions
//     under one routing table listing every member gossip counts alive
//     (each asked over the owner channel): each bucket is then on its
//     partition's owner and backup, so one copy outlives the leave. It
//     gives up LeaveTimeout + 1 s before its context's deadline, leaves
//     all the same and returns an error matching ErrUnreplicated naming
//     the members that did not vouch (TestShutdownUnreplicatedIsBounded).
//     It guards against its own leave only: two members stopped at once
//     may each see the other's copies. Restarting each member once every
//     member reports Member.Replicated, as TestNetRollingRestart (50
//     buckets drawn under load) and TestNetRollingRestartIdle (50 drawn
//     buckets nobody checks) do, loses nothing too (0 lost, 0
//     over-admitted), and no Shutdown then waits. Olric copies a bucket to a partition's new backup
//     only when it is written, so an owner writes back, once per ownership
//     or backup change, a bucket it read and did not change; and after
//     every routing read in which a partition it owns changed owner or
//     backups (or a gap between reads, or a split, may have hidden such a
//     change), it lists the partition's keys on every member holding its
//     data (Olric's scan of their primary and backup fragments) and writes
//     back each bucket it has not written since, under the key's lock and
//     the hand-over guard like any execution (a key its read finds absent,
//     expired or hidden by a move, is left). Replicated is true once every
//     partition it owns is done. What that costs, per routing change: one
//     pipelined round trip per holder and per place in the partitions'
//     holder lists (every holder asked at once), whatever number of
//     partitions changed, and one read and one write per bucket of them,
//     16 at a time. Measured (TestRollingRestartIdle under the race
//     detector, the machine loaded 25-30 by other sessions): every member
//     reported Replicated 3.4-4.9 s after each restart's routing settled;
//     when the sweep listed each partition's keys one holder and one
//     fragment at a time, and started over whenever a routing read came
//     late, one restart of three had not after 60 s beside 8 busy loops
//     (load 10-12). Before Shutdown waited for the others, a
//     member stopped before every member reported Replicated could take a
//     bucket's last copy: TestNetRollingRestartIdle without that wait lost
//     13 and 20 of 50 buckets in two runs, and 50 of 50 before the sweep,
//     each then starting full. Olric moves a previous owner's data to the new owner
//     in its balancer, which the member runs every RoutingRefresh
//     (Olric's default is 15 s), so the
//     data is there when the new owner's HandoverGrace ends: its reads
//     merge only the previous owners its own Olric table lists, which can
//     miss one that wrote just as the table changed. A member restarted
//     at its old address before the others declared the old process dead
//     refutes the old gossip record and is let in (TestNetKillRestart).
//   - A member leaves gracefully (Shutdown) with ReplicaCount 2: nothing; the
//     backups take over. Measured: 0 buckets lost, over-admission 0 in every
//     run but one slowed down by the race detector, where one bucket of 100
//     admitted 19 tokens too many while Olric had not yet promoted its backup
//     (TestGracefulLeave).
//   - A member leaves gracefully with ReplicaCount 1: Olric does not hand its
//     data over, so each bucket it owned is lost and starts again empty on
//     its new owner (see "Lost state"): measured, exactly the leaver's
//     buckets (about a third) and no other, and 0 over-admitted
//     (TestGracefulLeave).
//   - A member crashes (SIGKILL of its process): with ReplicaCount 1 exactly
//     the buckets whose data it alone held at the kill start over empty
//     and none a survivor held, with 2 none is lost, and none starts full
//     (TestCrash; but see "Lost state"); requests for its partitions
//     wait until memberlist declares it dead and the partitions are
//     handed over (see "Crash fail-over window").
//
// So during a membership change no bucket admits more than the exact
// bucket would, but for the rare read before Olric promotes a backup
// (TestGracefulLeave, ReplicaCount 2); with ReplicaCount 1 the buckets of a
// member that left or crashed start empty. A join costs nothing.
//
// What is not covered: clocks of different members far enough apart that a
// bucket moving between them sees time jump (core never mints tokens for
// time running backwards, but a clock ahead refills early).
//
// # Lost state
//
// A member that takes a partition over while no member that held the
// partition's data is left (its owner killed, paused past gossip's
// suspicion, or cut off by a split, with no backup: ReplicaCount 1, or
// every backup gone with it) cannot read the latest state of its buckets:
// a bucket it finds absent may have been drawn dry a moment before.
// Config.LostState says what it creates then. With LostEmpty, the default,
// the member records, per partition, the instant of such a takeover (its
// routing read that first showed it owning the partition) and creates any
// absent bucket of the partition as if it had been empty at that instant
// and refilled since, by core's integer arithmetic: a key first seen long
// after the takeover starts full anyway, so no window constant is needed,
// and a bucket whose state it can read (a backup's, a living previous
// owner's) keeps that state. So a fault admits at most the refill over its
// duration beyond the exact bucket, never a second capacity; with Quorum,
// 0. TestNetFaultBound asserts it for a host cut off, an owner paused and
// an owner killed, with one replica and with two: over-admitted ≤ rate ×
// fault duration + one check per member, where a fault lasts until the
// members read one cluster again (a kill, to the end of the run); the
// figures are in README.md's fault table. With LostFull the bucket starts full, as a new key would: every such
// takeover hands each lost bucket one more capacity.
//
// What LostEmpty costs a legitimate client: after a takeover without a
// copy, the lost partitions' clients wait for the refill, at most the time
// their bucket takes to refill from empty to what they ask (capacity /
// rate for a full burst; a bucket of 100 a minute, up to a minute), once
// per takeover. The default keeps the bound because a limit that an
// outage, a pause or a crash can double is no limit; an operator who
// prefers availability to accuracy sets LostFull, or keeps state instead
// with ReplicaCount 2, whose backups a new owner reads. Every member
// records such a takeover for every partition, whoever took it over, as
// its own routing reads show it, and a living member that hands the
// partition on passes the record along: its written buckets move with
// it, and its absent ones start on the next owner as if empty at the
// takeover, as they would have on it (the killed owner's partitions
// handed to one survivor, then on to another by a second rebalance, as
// when gossip on a machine starved of CPU declares a survivor dead and
// takes it back: TestLostTakeoverSequences; before, they started full
// there). The record reaches a member that never read the takeover too (one
// that joined or restarted since): every member that records a loss writes
// its instant into the partition itself (Olric routes the write to the
// owner; TestLostMarkQueue), a lost mark, an entry of the DMap named
// Config.DMap+".lost" whose key hashes to the partition, holding the instants
// of the partition's losses (the newest 16), and an owner that creates an
// absent bucket starts it from the later of its own record and the mark's
// latest loss before the member's first routing read returned: a later loss its
// own reads judged, so a mark that a split's other side wrote and Olric merged
// in at the heal changes nothing on a member that ran through the split
// (TestLostMarkHeeded; on one that joined during it, the new buckets of that
// side's partitions start as lost, an under-admission). A mark keeps every
// loss, not only the latest: on a starved machine members re-record partitions
// lost after a join (gossip declaring living members dead), and a mark that
// kept only that later loss, which the joiner judged, hid the earlier one it
// had to heed (TestLostMarkLaterLoss; TestLostReachesJoiner under -race beside
// 8 busy loops saw 13 of the 52 lost buckets its joiner took over start full).
// A full mark whose losses all came after the member's first read may have
// dropped one: the member heeds the oldest it kept, an under-admission. A mark
// whose bytes are not a mark (not 1 to 16 ascending positive instants) proves
// neither a loss nor none: the partition counts as lost at the creation, an
// under-admission, the member logs it, and the next loss recorded overwrites it
// (TestLostMarkCorrupt). Olric moves and replicates the mark with the
// partition's buckets, so it is wherever they are, whether or not a member that
// read the takeover is still alive, with no protocol of its own (a record
// shipped from member to member, as the journal is, needs a living sender that
// knows who the new owner is). A fresh member that joins after a kill, and the
// killed member restarted at its address, which takes its lost partitions back,
// start none of the lost buckets they take over full (TestLostReachesJoiner,
// ReplicaCount 1: all of them empty in its quiet runs; before marks, every one
// of them full). What it costs: one Olric Get more for each bucket created (two
// while another member holds data of its partition; none on a member that
// never heard of another and queued no mark, since nothing else writes one:
// TestFirstTouchAlone), none for a bucket that exists; and one entry per lost partition, kept for good (a mark older than a
// bucket's refill from empty changes nothing) of at most 128 bytes, whose
// fragment takes one 64 KiB table on the partition's owner and each backup. Not
// covered: a bucket created on a member that took the partition over before its
// mark was written (a member writes it in the background right after the
// routing read that recorded the loss, and retries every RoutingRefresh until
// it is stored); a loss no member recorded; a loss dropped because every member
// that recorded it wrote the mark at the same moment as another (a Get, then a
// Put: Olric has no compare-and-set). Measured with go test -race -run
// 'TestLostReachesJoiner/joined' beside 2 busy loops on a machine other work
// held at a load of 20-43: before, 2 runs passed (none of 83 and 46 lost
// buckets started full on the joiner) while the marks of its lost partitions
// moved on to losses recorded 11, 31 and 36 s after its first routing read, the
// hole above; after, 3 runs passed (none of 40, 24 and 69 started full on the
// joiner) and 4 ended before any verdict, the machine too loaded for the test
// (the joiner took over none of the 179 lost buckets; a SEED failed for 2
// minutes; twice the members did not settle within the run's time). Beside
// those loops the members re-recorded losses so often that one partition's mark
// held 16 within 150 s, all after a member's first read: that member heeds the
// oldest, an under-admission. A member that announced a graceful Shutdown
// counts as gone from then on, though Olric may still list it for a while: it
// takes the data it did not hand over with it. And a member that already owned
// a partition it read through previous owners records the takeover when all of
// them have gone (TestGracefulLeave, ReplicaCount 1: exactly the leaver's
// buckets start empty, none full; before, 5 runs of 47 started 12-67 of them
// full). Keep ReplicaCount 2 where members are restarted. A takeover with a
// holder left reads the bucket through Olric, whose Get can miss a copy its
// balancer is moving between members (it asks every holder at once, and a move
// copies, then deletes); so an owner that finds a bucket absent while another
// member holds data of its partition reads it once more, which finds a copy
// that one move hid (TestCrash, ReplicaCount 2: before, 6 runs of 40 started
// 1-28 buckets full; after, none in 39). That is not enough when Olric's members
// disagree on the routing table: beside 2 busy loops under the race
// detector TestCrash, ReplicaCount 2, failed 3 runs of 40 with the
// consistent read below, and in one, after routing settled, the
// coordinator's table still named the killed member owner of partitions
// another survivor's Olric held as their only owner, two reads agreeing;
// a copy on a member the owner's Olric does not list is read by neither
// Get. So an owner that finds a bucket absent, in a partition whose
// holders changed in its routing reads within the last 2 minutes (twice
// Olric's periodic table push) while a member left within that time too
// (one holding data in a read and gone from the next), asks every member
// its read names present, itself included, for the key in its own storage,
// primary and backup fragments, whatever its Olric's table says (Olric's
// dm.getentry), twice when the first round finds nothing (a move copies,
// then deletes), and creates the bucket from the newest copy (Olric's entry
// timestamp); with no copy it creates the bucket as before, unless a member
// did not answer within RoutingLease/2, refused the connection (a member
// the read names as holding data and no Olric listening: killed, its copies
// gone with it; TestAbsentDeadHolderStartsEmpty, before which such a bucket
// started full) or answered with bytes that are not an entry of the key
// (TestNewestCopyCorruptEntry): then, under LostEmpty, as empty since the
// partition moved (TestAbsentReadsEveryMember: a copy placed on a
// member the new owner does not list, after a member left; before, the
// bucket started full; TestReadWideUnanswered). What it costs: up to two
// rounds of one pipelined call per member, only for a bucket created
// absent in such a partition; none for a bucket that exists, none after
// joins alone (TestAbsentReadsEveryMember counts them) nor in a partition
// that has not moved (TestAbsentUnmovedPaysNothing). TestCrash still allows a
// tenth of the crashed member's buckets to start full with two replicas
// (none with one). The wide read does not close TestCrash under
// the race detector beside 2 busy loops (a test binary built with -race,
// `-test.run 'TestCrash$'` one run at a time, machine load 3-43 from other
// work): of 3 runs, 1 passed both subtests, 1 failed ReplicaCount 2 (19
// started full, 8 lost, 53 unsure, routing churning: WAIT 2 settled 8 ms
// after the kill, the subtest took 355 s), and the third failed
// ReplicaCount 1 (2 started full, 248 lost: the victim's partitions moved
// meanwhile); an earlier run at load 27-43 failed both subtests before
// the kill's verdict, seeding and reading timing out while routing
// churned. Those failures' full buckets were not traced to a cause. Not
// covered either: a bucket whose every copy
// died with the killed member although its partition had a backup on
// paper (the backup still moving when the kill came) while the new
// owner's reads listed the victim as a holder, so that no loss was
// recorded: no survivor holds a copy, so the wide read finds none and the
// bucket starts full; in the two earlier failures with lost buckets (14 and
// 58 lost, 16 and 32 started full) the wide read covers those a survivor
// held, not those. A takeover counts a prior holder only
// while it owns a partition in the new routing read (Olric can keep a dead
// member listed as a previous owner before gossip here declares it dead), and a
// partition whose latest owner left with every backup as lost although an older
// previous owner is still listed. TestNetFaultBound's "owner killed" row once
// saw 8 of the killed owner's buckets start full beside the other test-bed
// tests (152 tokens over a bound of 93), before the first of these rules and
// the record handed on; that run's routing reads were not kept, and both holes
// fit it. It runs beside them again, and beside 8 busy loops it admitted 0
// tokens over its bound in each of 5 runs. Olric's coordinator applies a new
// table one partition at a time, in map order, while it answers routing reads
// from the same partitions, and it keeps no version of the table that a read
// could compare, so a single read can be torn: some of a killed member's
// partitions moved while the member still owns others and so counts as present.
// A member therefore uses a table only once two consecutive reads returned it
// alike (at most four reads; a table still changing then is a failed read, and
// the member keeps its previous one until its lease ends: TestRoutingReadTorn),
// one read more per refresh while the table stands still. A pair of reads is
// torn only if the coordinator's apply stalls across both, which a starved
// machine can still do, so an owner change whose previous holders that read
// lists nowhere (neither as previous owner nor as backup) still stays watched
// for 2*HandoverGrace, and the partition is lost at the read that shows them
// all gone (TestLostTakeoverSequences; TestCrash, ReplicaCount 1, under the
// race detector: before, 1 run of 30 started 16 of the killed member's 114
// buckets full, their new owner having recorded no loss, as the test command's
// race pass did once, 14 of 105; after, none in 71 runs, 21 of them beside 2
// busy loops). A living member that hands a partition on unlisted (Olric lists
// a previous owner until its data has moved, so one that held none of it) and
// leaves within that window loses the partition too: its absent buckets start
// empty, an under-admission.
//
// # Network splits
//
// Olric is AP: when the network splits, each side declares the other's
// members dead and takes over their partitions, so each side owns every key
// and, by default, admits on its own; the other side's buckets it cannot
// read start empty there, within the bound of "Lost state".
//
// A split heals by itself. memberlist never contacts a member it declared
// dead, so every HealInterval (1 s) a member asks the members it misses to
// let it in again: those it saw alive that own nothing in its routing
// table, and, while any is missing, Peers and what Discover finds. Once
// the network is back the sides form one cluster and one routing table
// (TestNetPartitionHeals, one host of three cut off: 0.2-2.5 s after the
// network returned).
//
// A heal forgets no consumption and counts none twice. While gossip
// misses a member it knew, an owner journals the buckets it writes (up to
// 65,536, the oldest dropped first), and each such write stamps the
// bucket's stored state with a lineage (internal/journal): per branch, a
// random ID and the tokens the branch consumed, where a branch is one
// member's chain of writes of the bucket during one split, each reading
// the state the one before wrote, and a write's consumption is the
// bucket's tokens before it less those after it at the same instant (so
// refill does not count). A write outside a split keeps the lineage it
// read; a member that finds, in the state it reads, its branch at another
// count than it last journaled (the state came from elsewhere) starts a
// new branch. Once every member is back, each member sends every bucket
// it journaled to the bucket's owner, which subtracts from its own state
// the consumption the incoming lineage holds beyond its own (a branch its
// state lacks, or the part of a count it has not seen), into debt if the
// sides together admitted more than the bucket held (refill repays it),
// and keeps both lineages' branches at the higher count. Consumption
// made before the split, the common ancestor, is in both states and
// carries no branch, so it is never subtracted; a state that already
// holds a branch (its own side's, a merge of it that arrived before, a
// later state of the same chain, a second split's before the first
// merged) subtracts nothing for it, so copies that share no split never
// count each other, and a copy merged twice counts once. A side that
// held no copy of a bucket (the default's minority, which creates it full)
// lacks the consumption made before the split, so the owner also
// subtracts its own lineage's branches beyond the incoming one from the
// incoming state, and keeps whichever result holds fewer tokens: where
// the owner kept that fresh copy, the other side's history wins. The owner
// writes the bucket at every merge, changed or not, so that Olric, which
// keeps the copy written last when it moves the other side's data in,
// keeps the merged one. The merged bucket lives until it is full again at
// least. What this costs: with
// one replica a side that took a bucket over without its state started
// it empty (see "Lost state") and admitted about nothing, and where the
// owner keeps that side's copy the other side's consumption is
// subtracted from near empty: the bucket under-admits by what it held at
// the split, once. A lineage keeps 8 branches, the oldest dropped: a
// late merge of a dropped one counts it twice (under-admits). A bucket
// the journal dropped (beyond its bound) is not merged: Olric's last
// write decides, and the other side's consumption of it may be
// forgotten. A bucket written during a split carries its lineage (9 to
// 18 bytes a branch) in every later write until it expires or is removed.
// TestNetHealForgetsNoConsumption (3 secured members, 2 replicas, keys
// of 1,500; both sides consume, the
// network heals) asserts that every key then holds no more than the
// capacity less what both sides admitted plus the refill of the whole
// run: 0 tokens forgotten (README.md's fault table has the figures);
// internal/journal's tests cover the rule with both sides consumed, one
// side only, a side that created the bucket fresh, a second split before
// the first merged, and copies that share no split. Every member must run a build that knows the lineage:
// an older one reads a stamped state as corrupt.
//
// A paused coordinator. Olric's coordinator (the oldest member) reads
// the routing table from itself. Paused (SIGSTOP) or starved past
// gossip's suspicion, it is declared dead; the others elect another
// coordinator, move its partitions and, once their hand-over guard ended,
// check its keys, journaling what they write (they miss a member). Woken,
// it knows none of this and serves its table from before the pause; once
// it refuted its death it is the coordinator again, and the others read
// that table too. So a member that reads a table from itself after a gap
// of its own in its reads (its process stopped or starved, not a
// coordinator that did not answer) longer than HandoverGrace-RoutingLease
// and than gossip's quickest death (ProbeTimeout plus SuspicionMult
// probe intervals: no shorter gap lets the others declare it dead) takes
// the read for a hand-over of everything: it holds every partition
// it owns for HandoverGrace (again when the rise of its incarnation
// arrives), and only the others' journal merges run meanwhile, which
// subtract what they admitted of its buckets; they ship them as soon as
// they read one cluster again, tens of milliseconds after it woke. With
// one replica the others started its buckets empty (see "Lost state") and
// spent only the refill. What it costs: a
// coordinator's keys wait HandoverGrace after any gap of its own over
// that (0.5 s with the defaults), a pause or a starved process. Not
// covered: a merge that arrives after the hold ended (the others did not
// read one cluster within HandoverGrace of the wake).
// TestNetFaultWorstInterval's coordinator points keep it (README.md's
// fault table).
//
// With Config.Quorum set, a member executes only while gossip counts a
// majority of the members it knew (a member that left with Shutdown
// announces it and is no longer counted): the small side of a split
// answers ErrNoQuorum at once, the majority starts the buckets it took
// over from the small side empty (see "Lost state"), so a split admits
// nothing beyond the exact bucket, and after the heal each bucket holds
// what the exact bucket holds: the majority's state where it admitted,
// the small side's last one where the majority admitted nothing
// (TestNetQuorum, TestNetFaultBound). The
// caller's failure mode decides what the small side's clients get. Two
// members cannot form a majority without each other: use three or more.
//
// # Crash fail-over window
//
// When a member crashes, its keys (about one in N with N members) are
// unavailable until memberlist declares it dead, Olric updates the routing
// table and the new owners take over. Gossip probes a member every
// ProbeInterval (100 ms), waits ProbeTimeout (50 ms) for its ack, then asks
// other members to probe it; a member nobody reached is suspected, and
// declared dead after SuspicionMult (2) probe periods once another member
// confirms the suspicion, at most twice that without. The new owner's
// HandoverGrace (which waits out the old owner's routing lease) is skipped
// when the old owner's owner channel refuses a connection: its host
// answered and nothing listens, so the process is gone. A paused process,
// an unreachable host or a partition proves nothing, and the grace stays.
// The other members' keys stay available: gossip declaring the member
// dead opens a split in each member's view (a member missing), and a
// split hands nothing over until it ends; it ends without a hand-over
// when every member missing during it was proven dead (a crash, not a
// partition), or when no member declared this one dead meanwhile (its
// own gossip incarnation unchanged: the others were paused or stalled,
// and no side reassigned its partitions; TestNetResumeKeepsKeys). After
// a partition it is a hand-over of every partition, each held for
// HandoverGrace. Measured on the test bed, 3 members on 3 hosts, each check
// attempt bounded by 100 ms (TestNetCrashWindow): see the table of faults
// in the README; with memberlist's own probe timings (1 s period,
// suspicion 4 or more) it was 6.9-9.0 s. Larger clusters take longer: memberlist's suspicion timeout
// grows with log10 of the member count. With two busy loops holding both
// cores, no member was suspected wrongly and no partition guarded in 6 s
// of checks (TestNetNoFalseHandover); a member stalled for longer than the
// suspicion timeout is declared dead and rejoins when it runs again. A
// member stalled for less (its routing reads late, nothing moved) guards
// nothing: across a gap between its routing reads it guards only the
// partitions whose owner list or backups changed
// (TestNetStarvedMember). A
// graceful Shutdown announces the leave, so only about HandoverGrace of it
// remains.
//
// A paused owner (SIGSTOP, a long GC pause, a frozen VM) is declared dead
// like a crashed one, and its keys move after HandoverGrace. When it runs
// again, its routing read is older than RoutingLease, so it executes
// nothing, requests read before the pause included, until it has read the
// new routing table, and an Olric write it had begun is bounded by the
// same lease (TestNetPausedOwner: paused 10 s under load, nothing admitted
// beyond what the bucket allowed).
//
// What callers see during the window depends on their deadline. A check
// whose context has a deadline longer than the window, or none (then
// Config.RequestTimeout, 10 s by default, bounds it), waits and succeeds
// once the new owner takes over. A check with a shorter deadline fails
// with context.DeadlineExceeded for the window, and the caller's failure
// mode decides: fail-open admits the crashed member's clients without
// limit for that time, fail-closed refuses them.
//
// No answer comes later than its caller's deadline, scheduling aside.
// Olric v0.7.4 does not bound a write to a partition's backups, or a read
// from its previous owners, by the context it is given: a crashed or
// paused one holds the call, and the key's lock, until Olric's own
// timeouts end it. So an execution on a partition with a backup or a
// previous owner runs on a goroutine of its own, and its caller (or the
// owner channel, for a remote caller) stops waiting at the deadline: the
// context's, Config.RequestTimeout without one, or the budget a remote
// caller sent. A request still waiting on the caller's side of the owner
// channel when its caller leaves, or when its budget runs out (then
// answered with context.DeadlineExceeded), is never sent; one that is sent
// carries the budget left when its write began. An execution that gets the
// key's lock after its caller left runs nothing; one its caller left while it was in Olric completes, and
// what it consumed stays consumed, as for any answer lost on the way. A
// partition that is this member's alone (ReplicaCount 1, once no previous
// owner holds data of it) executes in place, as before. At most 4,096
// executions may outlive their callers; beyond that the owner refuses new
// ones at once with an error rather than pile up goroutines.
//
// A member can miss the routing push of a crash: Olric's coordinator
// pushes its table once per membership change, and a member refuses a push
// from a coordinator its own gossip does not name yet (the killed member
// was the coordinator, and the survivor that declared it dead first pushed
// before the other did). Its Olric then keeps sending the partitions handed
// to it to the dead member until Olric's next periodic push, a minute
// later. Each routing read compares the table the member's Olric applies
// with the coordinator's; after a second of disagreement the member asks
// the coordinator, over Olric's pub/sub, to push again, and again every
// second while it disagrees; also while the member's view counts a split,
// when every member missing from it was proven dead (a crash stays a split
// in that view), not during a split with a member not proven dead. The
// coordinator answers by sending the table it computed last to the asking
// member alone, on a connection of its own, within a second; it reads that
// table under Olric's routing lock only when the lock is free and holds it
// during no push. Olric holds that lock while it computes a table and
// pushes it to every member, waiting on any member that does not answer;
// an ask meanwhile is not answered, and the member asks again a second
// later. TestMissedRoutingPush puts a member's Olric in that state: every
// key answers again within the test's bound (without the ask they fail
// until Olric's periodic push), and a bucket drained before admits nothing
// after. TestCrashMissedPush kills the coordinator's process and keeps a
// survivor's Olric on the table from before the kill for 5 s: the buckets
// answer within 30 s of that end (before, a minute: the ask was skipped in
// a split), and none whose data died with the killed member starts full.
// Not covered: a stale table that routes a partition to a living
// member whose Olric routes it back (a partition moved between survivors)
// loops Olric's Gets between the two until their connection pools are
// spent; the push to the asker comes on a connection of its own, but no
// test shows that it ends the loop.
//
// # Token leases
//
// With Config.Leases.Enabled (every bucket) or Leases.Exact (only buckets
// whose every bandwidth is refilled intervally, which a lease keeps exact:
// see the bound below), a member that consumes from a key it does not own
// often (MinDemand tokens, default 2, within the last one to two
// Lifetimes) takes a lease with its next check: one request to the owner
// runs the check, then takes as many tokens as it can up to twice that
// demand, under the key's lock and written like any consumption, so the
// owner's bucket stays the truth and has paid for every token a lease
// holds. The
// owner answers with the tokens and its bucket as it was before it took
// them. The member then decides the key's consumptions itself, running
// core on that copy, while the lease holds the tokens they take and until
// it ends: Lifetime after the member sent the request, and, for a bucket
// with an intervally refilled bandwidth, before that bandwidth's next
// refill by the owner's clock (the member counts from its send, so it
// ends early, never late). A check the lease cannot pay in full goes to
// the owner, so a refusal is always the owner's. Cold keys take one hop per
// check, as without leases; hot keys one per Lifetime per member.
//
// Where leases pay. A member keeps no lease state for a key it has checked
// once: a slot per hash notes the last key checked there and the Lifetime
// of the check, and only a key checked again within the same or the next
// Lifetime gets a record of its demand (TestLeaseColdKeysKeepNoState), so
// that keys checked once each, as 10,000 descriptors are, cost what they
// cost without leases. A lease pays at a few checks per Lifetime too: the
// lease request replaces a hop the check takes anyway, and every further
// check in the lease's Lifetime saves one (BenchmarkLeaseDemand: a key
// each of three members checks about three times per Lifetime; the
// figures are in docs/benchmarks.md). So a member leases a key it
// consumed two tokens of within its last one to two Lifetimes, as the
// default MinDemand says, however many members check the key
// (TestLeaseLowDemandOnSeveralMembers).
//
// Decided on a lease: requests whose operations are TryConsume,
// TryConsumeAndReturnRemaining, TryConsumeAsMuchAsPossible, Estimate,
// AvailableTokens and replacements by the configuration already stored,
// at least one of them a consumption. Their results (remaining tokens,
// waits) are the owner's bucket as of the grant less the lease's own
// checks. Everything else (estimates alone, verbose requests, additions,
// resets, a newer configuration) goes to the owner.
//
// The bound. Every lease check is one the owner's bucket would have
// admitted at the grant: shift each to its lease's grant and the admitted
// checks are an exact bucket's. A lease is used for at most Lifetime after
// its grant, so in any interval of length w the members admit no more than
// an exact bucket admits in w + Lifetime: for a greedy bandwidth of
// capacity C and rate r, at most C + r×(w + Lifetime), the exact bucket's
// C + r×w plus r×Lifetime (TestLeaseBoundGreedy searches random schedules
// of several members for the worst interval, and finds leases used beyond
// their lifetime over it). A lease never outlives its window, so an
// intervally refilled bucket admits exactly what it would without leases:
// no window more than its tokens (TestLeaseWindowExact, TestLeaseCluster).
//
// Giving back. A lease that ends with tokens left returns them with the
// member's next lease request for the key (its next check of the key, which
// asks for the give-back alone when its demand fell below MinDemand:
// TestLeaseGiveBackAtLowDemand), capped on the owner under the
// key's lock: unused minus what refill may have added to any bandwidth
// since the grant (greedy: ⌈r×elapsed⌉+1; intervally: the refill of each
// period boundary passed), at least 0. Proof that this never mints: let E
// be the exact bucket in which every lease took at its grant only what it
// used. E − bucket starts at the unused part u of a lease when it is
// granted, and refill lowers it by at most what refill added to the
// bucket (both are capped at the same capacity), so after a refill F it
// is at least u − F; adding back at most u − F, capped, leaves the bucket
// at or below E, and from equal or fewer tokens the same requests leave
// fewer or equal (TestLeaseGiveBackNeverMints replays E). A give-back is
// applied only by the owner that granted the lease, in the same routing
// epoch of the partition and the key's lease generation (see the fence
// below), to a bucket of the same configuration and version; otherwise,
// or when the member forgets the key, the tokens are dropped, which loses
// them and never mints.
//
// Membership changes. A lease's tokens were consumed from the owner's
// bucket and written before the grant was answered, so the bucket that
// migrates has already paid for them: the holder may spend them until
// the lease ends whoever owns the key then, and nothing is spent twice.
// Give-backs are fenced by the epoch: a new owner, or the old one owning
// the partition again, drops them.
//
// The fence. An operation that can give a bucket tokens otherwise than
// by refill (a reset, an addition, a replacement of the configuration
// that changes anything, explicit or by a newer configuration version,
// and a removal, after which the bucket is created anew) would otherwise
// let holders spend, on top of what it gives, tokens paid before it. So
// the owner keeps, in memory, a record of each key it granted leases on:
// the instant from which none of them is used any more (the grant's
// execution plus the Lifetime it allowed, which the holder counts from
// its earlier send) and the key's lease generation. Such an operation
// waits (the caller is answered "hold" and tries again, as during a
// hand-over) until that instant, while the owner grants no lease on the
// key; it then runs, and the key takes a new generation: a give-back
// carrying an older one is dropped. An owner also cannot know the leases
// a previous owner of the partition granted, so it holds such operations
// until one Lifetime after its own first execution in the partition's
// epoch: the hand-over lets the previous owner execute nothing after the
// new one's first execution, so every lease it granted has ended by then.
// The bound, exactly: when such an operation runs, no lease granted
// before it can be used again, and no token of one comes back; the checks
// after it are decided on the bucket it left and on leases taken from
// that bucket, so the bounds above hold across it. The price: such an
// operation on a key with leases in use, or just after a partition moved,
// waits up to one Lifetime (up to two when it arrives just after the move
// and the new owner granted leases meanwhile), and give-backs of leases
// granted before it are lost (the bucket refuses early, never admits
// more). It relies on every member using the same Lifetime; an owner with
// leases off grants none, so that every lease is fenced
// (TestLeaseFence shows a reset, an addition, a replacement and a removal
// admit their bucket and no more, where without the fence the holders'
// leases came on top). The records are bounded by MaxKeys per member; a
// lease request that finds no room is answered without a grant.
//
// Leases are off by default: they relax the exact contract above for
// greedy buckets by r×Lifetime (Leases.Exact leases none:
// TestLeaseExactOnly, TestLeaseExactOwnerGrantsNone), report remaining
// tokens as of the grant and delay resets, additions, replacements and
// removals of leased keys by up to a Lifetime, and a cluster must run a
// build that knows them on every member.
// See README.md for what they save.
//
// # Retries
//
// A request whose owner connection breaks before the answer arrives is
// sent again (to the same owner or, after re-routing, the new one), so it
// may be applied twice: a consumption may be counted twice, never
// forgotten. Errors from Olric on the owner are retried the same way
// until the request's context (or Config.RequestTimeout) ends. An owner
// does not execute a request whose caller stopped waiting before its turn
// came (measured from when the owner read it).
//
// # Performance
//
// What a check costs (BenchmarkCheck, beside Olric's Lock+Get+Put+Unlock
// and gubernator), with the workload, the command and where a check's CPU
// goes, is in README.md's "Figures".
//
// # Module path
//
// Olric's module path is github.com/olric-data/olric. Where a module proxy
// refuses that path, add to go.mod
//
//	replace github.com/olric-data/olric v0.7.4 => github.com/buraksezer/olric v0.7.4
package olric
