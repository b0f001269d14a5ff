#!/usr/bin/env bash
# servers.sh start|stop|env|status — the real servers the backend tests use.
#
#   start   build (once) and start FerretDB (MongoDB wire protocol, SQLite
#           handler), gocaves (Couchbase mock cluster), redis-server, and
#           PostgreSQL with a second FerretDB on it (its PostgreSQL handler)
#           on free 127.0.0.1 ports, wait until each is ready and write
#           .servers/env. Idempotent: servers already running are kept.
#   stop    stop what start started (pid files under .servers/) and remove
#           .servers/env.
#   env     print .servers/env, for: eval "$(scripts/servers.sh env)"
#   status  show which servers run.
#
# Binaries are built from the Go module proxy into a per-user cache
# ($BUCKETGRID_SERVERS_CACHE, default ~/.cache/bucketgrid-servers), so fresh
# clones on one machine (CI's) reuse them, and rebuilt only when missing or
# when tools/testservers changed. Builds use a private GOCACHE beside them: a
# shared cache trimmed mid-build breaks them; temporary binaries carry the
# builder's pid. redis-server comes from apt-get when it is not installed.
# Set SERVERS_NO_REDIS=1 to skip redis. PostgreSQL comes from apt-get too
# (Debian's postgresql) and runs as an unprivileged user: the caller, or the
# package's postgres user when the caller is root; its data directory and
# socket are under .servers/. Set SERVERS_NO_POSTGRES=1 to skip it.
#
# The cache also holds envoyproxy/ratelimit (the peer of cmd/bucketgrid's
# differential test and benchmark), built once at the pinned pseudo-version
# below. It is not started here: the tests start it on the Redis above with a
# runtime folder of their own. Builds into the cache hold a per-user lock, so
# two checkouts starting their servers at once never build the same binary
# concurrently.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
srv=$root/.servers
cache=${BUCKETGRID_SERVERS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/bucketgrid-servers}
bin=$cache/bin
tools=$root/tools/testservers
envfile=$srv/env

log() { echo "servers.sh: $*" >&2; }
die() {
	log "$*"
	exit 1
}

# alive PIDFILE BINARY: the pid in PIDFILE runs BINARY (guards against a
# recycled pid so stop never kills a process it did not start).
alive() {
	local pid exe
	[ -f "$1" ] || return 1
	pid=$(cat "$1" 2>/dev/null) || return 1
	[ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
	exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 0
	case $exe in *"$2"*) return 0 ;; *) return 1 ;; esac
}

stop_one() { # PIDFILE BINARY
	local pid i
	if alive "$1" "$2"; then
		pid=$(cat "$1")
		kill -TERM "$pid" 2>/dev/null || true
		for i in $(seq 50); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$pid" 2>/dev/null || true
	fi
	rm -f "$1"
}

# stamp of the sources a binary is built from; a change forces a rebuild.
stamp() { cat "$tools/go.mod" "$tools/go.sum" "$@" 2>/dev/null | cksum | cut -d' ' -f1; }

# The envoyproxy/ratelimit commit the peer is built from: the newest the
# module proxy served when it was pinned.
ratelimit_version=v1.4.1-0.20260122083618-3fb702589d36

build() {
	mkdir -p "$bin"
	exec 8>"$cache/build.lock"
	flock 8
	local s
	export GOCACHE=$cache/gocache GOWORK=off GOFLAGS=-buildvcs=false
	s=$(stamp "$tools"/cmd/ferretdb/*.go)
	if [ ! -x "$bin/ferretdb" ] || [ "$(cat "$bin/ferretdb.stamp" 2>/dev/null)" != "$s" ]; then
		log "building FerretDB v1.24.2 (about a minute on a cold cache)"
		(cd "$tools" && go build -o "$bin/ferretdb.tmp.$$" ./cmd/ferretdb) && mv "$bin/ferretdb.tmp.$$" "$bin/ferretdb"
		echo "$s" >"$bin/ferretdb.stamp"
	fi
	s=$(stamp "$tools/build-gocaves.sh")
	if [ ! -x "$bin/gocaves" ] || [ "$(cat "$bin/gocaves.stamp" 2>/dev/null)" != "$s" ]; then
		log "building gocaves v0.0.1-75 (about 40 s on a cold cache)"
		"$tools/build-gocaves.sh" "$bin/gocaves"
		echo "$s" >"$bin/gocaves.stamp"
	fi
	if [ ! -x "$bin/envoy-ratelimit" ] || [ "$(cat "$bin/envoy-ratelimit.stamp" 2>/dev/null)" != "$ratelimit_version" ]; then
		log "building envoyproxy/ratelimit $ratelimit_version (about a minute on a cold cache)"
		local gobin
		gobin=$(mktemp -d "$cache/ratelimit.XXXXXX")
		GOBIN=$gobin go install "github.com/envoyproxy/ratelimit/src/service_cmd@$ratelimit_version"
		mv "$gobin/service_cmd" "$bin/envoy-ratelimit"
		rm -rf "$gobin"
		echo "$ratelimit_version" >"$bin/envoy-ratelimit.stamp"
	fi
	flock -u 8
	exec 8>&-
}

# wait_for FILE PIDFILE NAME: wait up to 30 s for FILE to be non-empty while
# the process is alive.
wait_for() {
	local i
	for i in $(seq 300); do
		[ -s "$1" ] && return 0
		kill -0 "$(cat "$2")" 2>/dev/null || die "$3 exited at start; see $srv/$3.log"
		sleep 0.1
	done
	die "$3 not ready after 30 s; see $srv/$3.log"
}

free_port() {
	local p i
	for i in $(seq 100); do
		p=$((20000 + (RANDOM * 32768 + RANDOM) % 40000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return 0
		fi
	done
	die "no free port found"
}

start_ferretdb() {
	if alive "$srv/ferretdb.pid" "$bin/ferretdb" && [ -s "$srv/ferretdb.uri" ]; then
		return 0
	fi
	stop_one "$srv/ferretdb.pid" "$bin/ferretdb"
	rm -rf "$srv/ferretdb-data" "$srv/ferretdb.uri"
	# setsid: the server outlives this script and ignores the caller's ^C.
	setsid "$bin/ferretdb" --listen-addr=127.0.0.1:0 --data-dir="$srv/ferretdb-data" \
		--uri-file="$srv/ferretdb.uri" --log-level=error \
		</dev/null >"$srv/ferretdb.log" 2>&1 9>&- &
	echo $! >"$srv/ferretdb.pid"
	wait_for "$srv/ferretdb.uri" "$srv/ferretdb.pid" ferretdb
}

start_gocaves() {
	if alive "$srv/gocaves.pid" "$bin/gocaves" && [ -s "$srv/gocaves.connstr" ]; then
		return 0
	fi
	stop_one "$srv/gocaves.pid" "$bin/gocaves"
	rm -f "$srv/gocaves.connstr"
	# Run gocaves from inside .servers so nothing it writes lands in the checkout.
	mkdir -p "$srv/gocaves-run"
	(cd "$srv/gocaves-run" && exec setsid "$bin/gocaves" --mock-only </dev/null >"$srv/gocaves.log" 2>&1 9>&-) &
	echo $! >"$srv/gocaves.pid"
	local i line
	for i in $(seq 300); do
		line=$(grep -o '"connstr":"[^"]*"' "$srv/gocaves.log" 2>/dev/null | head -1 || true)
		if [ -n "$line" ]; then
			line=${line#\"connstr\":\"}
			echo "${line%\"}" >"$srv/gocaves.connstr"
			return 0
		fi
		kill -0 "$(cat "$srv/gocaves.pid")" 2>/dev/null || die "gocaves exited at start; see $srv/gocaves.log"
		sleep 0.1
	done
	die "gocaves not ready after 30 s; see $srv/gocaves.log"
}

start_redis() {
	[ -n "${SERVERS_NO_REDIS:-}" ] && return 0
	local rs
	rs=$(command -v redis-server || true)
	if [ -z "$rs" ]; then
		log "installing redis-server with apt-get"
		if ! { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null 2>&1 ||
			{ apt-get update -qq >/dev/null 2>&1 &&
				DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null 2>&1; }; }; then
			log "could not install redis-server; REDIS_ADDR stays unset"
			return 0
		fi
		rs=$(command -v redis-server) || return 0
	fi
	if alive "$srv/redis.pid" redis && [ -s "$srv/redis.addr" ]; then
		return 0
	fi
	stop_one "$srv/redis.pid" redis
	rm -f "$srv/redis.addr"
	local port i try
	for try in 1 2 3; do
		port=$(free_port)
		setsid "$rs" --bind 127.0.0.1 --port "$port" --save '' --appendonly no \
			--dir "$srv" --daemonize no </dev/null >"$srv/redis.log" 2>&1 9>&- &
		echo $! >"$srv/redis.pid"
		for i in $(seq 100); do
			kill -0 "$(cat "$srv/redis.pid")" 2>/dev/null || break
			if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
				echo "127.0.0.1:$port" >"$srv/redis.addr"
				return 0
			fi
			sleep 0.05
		done
		stop_one "$srv/redis.pid" redis
	done
	die "redis-server did not start; see $srv/redis.log"
}

# pg_bin: the newest installed PostgreSQL's bin directory, installing
# Debian's postgresql when there is none.
pg_bin() {
	local d
	d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
	if [ -z "$d" ]; then
		log "installing postgresql with apt-get"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null 2>&1 ||
			{ apt-get update -qq >/dev/null 2>&1 &&
				DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null 2>&1; } ||
			return 1
		d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
	fi
	[ -n "$d" ] && echo "$d"
}

# as_pg CMD…: run CMD as the unprivileged user PostgreSQL runs as.
as_pg() {
	if [ "$(id -u)" = 0 ]; then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

start_postgres() {
	[ -n "${SERVERS_NO_POSTGRES:-}" ] && return 0
	local pgb port i
	pgb=$(pg_bin) || {
		log "could not install postgresql; MONGODB_PG_URI stays unset"
		return 0
	}
	if alive "$srv/postgres.pid" postgres && [ -s "$srv/postgres.port" ]; then
		return 0
	fi
	stop_postgres
	rm -rf "$srv/pg-data" "$srv/pg-run" "$srv/postgres.port"
	mkdir -p "$srv/pg-data" "$srv/pg-run"
	if [ "$(id -u)" = 0 ]; then
		chown postgres: "$srv/pg-data" "$srv/pg-run"
		as_pg test -w "$srv/pg-data" || die "the postgres user cannot write $srv/pg-data (a parent directory it cannot enter?)"
	fi
	as_pg "$pgb/initdb" -D "$srv/pg-data" -U postgres --auth=trust -E UTF8 --no-sync >"$srv/postgres.log" 2>&1 ||
		die "initdb failed; see $srv/postgres.log"
	port=$(free_port)
	# Test data: no fsync, no durability. Loopback and a socket under .servers.
	local run=()
	[ "$(id -u)" = 0 ] && run=(runuser -u postgres --)
	setsid "${run[@]}" "$pgb/postgres" -D "$srv/pg-data" -k "$srv/pg-run" -h 127.0.0.1 -p "$port" \
		-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200 \
		</dev/null >>"$srv/postgres.log" 2>&1 9>&- &
	for i in $(seq 300); do
		if [ -s "$srv/pg-data/postmaster.pid" ] && as_pg "$pgb/pg_isready" -q -h "$srv/pg-run" -p "$port"; then
			head -1 "$srv/pg-data/postmaster.pid" >"$srv/postgres.pid"
			as_pg "$pgb/createdb" -h "$srv/pg-run" -p "$port" -U postgres ferretdb >>"$srv/postgres.log" 2>&1 ||
				die "createdb failed; see $srv/postgres.log"
			echo "$port" >"$srv/postgres.port"
			return 0
		fi
		sleep 0.1
	done
	die "PostgreSQL not ready after 30 s; see $srv/postgres.log"
}

stop_postgres() {
	local pgb
	if alive "$srv/postgres.pid" postgres; then
		pgb=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
		as_pg "$pgb/pg_ctl" -D "$srv/pg-data" -m fast -w stop >/dev/null 2>&1 || true
		stop_one "$srv/postgres.pid" postgres
	fi
	rm -f "$srv/postgres.pid"
}

# start_ferretdb_pg: a second FerretDB, on the PostgreSQL above.
start_ferretdb_pg() {
	[ -s "$srv/postgres.port" ] || return 0
	if alive "$srv/ferretdb-pg.pid" "$bin/ferretdb" && [ -s "$srv/ferretdb-pg.uri" ]; then
		return 0
	fi
	stop_one "$srv/ferretdb-pg.pid" "$bin/ferretdb"
	rm -rf "$srv/ferretdb-pg-data" "$srv/ferretdb-pg.uri"
	setsid "$bin/ferretdb" --listen-addr=127.0.0.1:0 --data-dir="$srv/ferretdb-pg-data" \
		--postgresql-url="postgres://postgres@127.0.0.1:$(cat "$srv/postgres.port")/ferretdb" \
		--uri-file="$srv/ferretdb-pg.uri" --log-level=error \
		</dev/null >"$srv/ferretdb-pg.log" 2>&1 9>&- &
	echo $! >"$srv/ferretdb-pg.pid"
	wait_for "$srv/ferretdb-pg.uri" "$srv/ferretdb-pg.pid" ferretdb-pg
}

write_env() {
	{
		echo "export MONGODB_URI='$(cat "$srv/ferretdb.uri")'"
		echo "export COUCHBASE_CONNSTR='$(cat "$srv/gocaves.connstr")'"
		echo "export COUCHBASE_USERNAME=Administrator COUCHBASE_PASSWORD=password COUCHBASE_BUCKET=default"
		echo "export FERRETDB_BIN='$bin/ferretdb' GOCAVES_BIN='$bin/gocaves'"
		echo "export ENVOY_RATELIMIT_BIN='$bin/envoy-ratelimit'"
		# the servers' pids, for benchmarks that report the servers' CPU
		echo "export FERRETDB_PID=$(cat "$srv/ferretdb.pid") GOCAVES_PID=$(cat "$srv/gocaves.pid")"
		if [ -s "$srv/ferretdb-pg.uri" ]; then
			echo "export MONGODB_PG_URI='$(cat "$srv/ferretdb-pg.uri")' FERRETDB_PG_PID=$(cat "$srv/ferretdb-pg.pid") POSTGRES_PID=$(cat "$srv/postgres.pid")"
		fi
		if [ -s "$srv/redis.addr" ]; then
			echo "export REDIS_ADDR='$(cat "$srv/redis.addr")' REDIS_PID=$(cat "$srv/redis.pid")"
		fi
	} >"$envfile.tmp"
	mv "$envfile.tmp" "$envfile"
}

cmd=${1:-}
case $cmd in
start)
	mkdir -p "$srv"
	exec 9>"$srv/lock"
	flock 9
	build
	start_ferretdb
	start_gocaves
	start_redis
	start_postgres
	start_ferretdb_pg
	write_env
	log "ready; source $envfile"
	;;
stop)
	mkdir -p "$srv"
	exec 9>"$srv/lock"
	flock 9
	stop_one "$srv/ferretdb.pid" "$bin/ferretdb"
	stop_one "$srv/gocaves.pid" "$bin/gocaves"
	stop_one "$srv/redis.pid" redis
	stop_one "$srv/ferretdb-pg.pid" "$bin/ferretdb"
	stop_postgres
	rm -f "$envfile" "$srv/ferretdb.uri" "$srv/gocaves.connstr" "$srv/redis.addr" "$srv/ferretdb-pg.uri" "$srv/postgres.port"
	rm -rf "$srv/ferretdb-data" "$srv/ferretdb-pg-data" "$srv/pg-data" "$srv/pg-run"
	;;
env)
	[ -f "$envfile" ] || die "no $envfile; run: scripts/servers.sh start"
	cat "$envfile"
	;;
status)
	alive "$srv/ferretdb.pid" "$bin/ferretdb" && echo "ferretdb: running $(cat "$srv/ferretdb.uri" 2>/dev/null)" || echo "ferretdb: stopped"
	alive "$srv/gocaves.pid" "$bin/gocaves" && echo "gocaves: running $(cat "$srv/gocaves.connstr" 2>/dev/null)" || echo "gocaves: stopped"
	alive "$srv/redis.pid" redis && echo "redis: running $(cat "$srv/redis.addr" 2>/dev/null)" || echo "redis: stopped"
	alive "$srv/postgres.pid" postgres && echo "postgres: running on port $(cat "$srv/postgres.port" 2>/dev/null)" || echo "postgres: stopped"
	alive "$srv/ferretdb-pg.pid" "$bin/ferretdb" && echo "ferretdb-pg: running $(cat "$srv/ferretdb-pg.uri" 2>/dev/null)" || echo "ferretdb-pg: stopped"
	;;
build)
	mkdir -p "$srv"
	build
	;;
*)
	echo "usage: $0 start|stop|env|status|build" >&2
	exit 2
	;;
esac
