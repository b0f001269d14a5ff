package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/couchbase/gocb/v2"
	goredis "github.com/redis/go-redis/v9"
	mongodrv "go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/grid/couchbase"
	"github.com/bucketgrid/bucketgrid/grid/mongo"
	"github.com/bucketgrid/bucketgrid/grid/redis"
)

// openStore opens the CAS store a URI names:
//
//	redis://[user:pass@]host:port[/db][?prefix=bucketgrid:]   (rediss:// for TLS)
//	mongodb://[user:pass@]host[:port][,host…]/[database][?options&collection=name]
//	couchbase://[user:pass@]host[:port][,host…]/[bucket]
//
// Every instance pointed at one store shares its buckets, as the grid's
// instances do; the store's compare-and-swap makes each check atomic.
func openStore(ctx context.Context, uri string) (*backend, error) {
	u, err := parseStoreURI(uri)
	if err != nil {
		return nil, err
	}
	switch u.scheme {
	case "redis", "rediss":
		return openRedis(ctx, u)
	case "mongodb", "mongodb+srv":
		return openMongo(ctx, u)
	case "couchbase", "couchbases":
		return openCouchbase(ctx, u)
	}
	return nil, fmt.Errorf("unknown scheme %q (want grid, memory, redis://…, mongodb://… or couchbase://…)", u.scheme)
}

// storeURI is a store URI taken apart. net/url cannot parse these: their
// host part lists several hosts.
type storeURI struct {
	scheme, user, password string
	hasUser                bool
	hosts, path            string
	query                  url.Values
}

func parseStoreURI(s string) (storeURI, error) {
	var u storeURI
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok || scheme == "" {
		return u, errors.New("not a URI (want grid, memory, redis://…, mongodb://… or couchbase://…)")
	}
	u.scheme = strings.ToLower(scheme)
	rest, rawQuery, _ := strings.Cut(rest, "?")
	authority, path, _ := strings.Cut(rest, "/")
	if i := strings.LastIndexByte(authority, '@'); i >= 0 {
		info := authority[:i]
		authority = authority[i+1:]
		user, pass, _ := strings.Cut(info, ":")
		var err1, err2 error
		u.user, err1 = url.PathUnescape(user)
		u.password, err2 = url.PathUnescape(pass)
		if err := errors.Join(err1, err2); err != nil {
			return u, fmt.Errorf("user information: %w", err)
		}
		u.hasUser = true
	}
	if authority == "" {
		return u, errors.New("no host")
	}
	u.hosts, u.path = authority, path
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return u, fmt.Errorf("query: %w", err)
	}
	u.query = q
	return u, nil
}

// driverURI puts the URI together again with path as its path, for a
// driver that reads URIs itself.
func (u storeURI) driverURI(path string) string {
	s := u.scheme + "://"
	if u.hasUser {
		s += url.UserPassword(u.user, u.password).String() + "@"
	}
	s += u.hosts + "/" + path
	if q := u.query.Encode(); q != "" {
		s += "?" + q
	}
	return s
}

// sweepInterval is how often expired documents are removed from a MongoDB
// server without TTL indexes (FerretDB); a real MongoDB removes them itself.
const sweepInterval = time.Minute

func openMongo(ctx context.Context, u storeURI) (*backend, error) {
	collName := u.query.Get("collection")
	if collName == "" {
		collName = "buckets"
	}
	u.query.Del("collection")
	db := u.path
	if db == "" {
		db = "bucketgrid"
	}
	client, err := mongodrv.Connect(options.Client().ApplyURI(u.driverURI(u.path)).SetServerSelectionTimeout(10 * time.Second))
	if err != nil {
		return nil, err
	}
	closeClient := func(ctx context.Context) error { return client.Disconnect(ctx) }
	store, err := mongo.New(client.Database(db).Collection(collName))
	if err != nil {
		closeClient(ctx)
		return nil, err
	}
	if err := store.EnsureIndexes(ctx); err != nil {
		closeClient(ctx)
		return nil, fmt.Errorf("indexes: %w", err)
	}
	sweepCtx, stopSweep := context.WithCancel(context.Background())
	swept := make(chan struct{})
	go func() {
		defer close(swept)
		t := time.NewTicker(sweepInterval)
		defer t.Stop()
		for {
			select {
			case <-sweepCtx.Done():
				return
			case <-t.C:
				store.RemoveExpired(sweepCtx, 10000)
			}
		}
	}()
	return &backend{exec: cas.New(store), store: store, describe: " collection=" + db + "." + collName,
		close: func(ctx context.Context) error {
			stopSweep()
			<-swept
			return closeClient(ctx)
		}}, nil
}

func openRedis(ctx context.Context, u storeURI) (*backend, error) {
	prefix := u.query.Get("prefix")
	if prefix == "" {
		prefix = "bucketgrid:"
	}
	u.query.Del("prefix")
	opts, err := goredis.ParseURL(u.driverURI(u.path))
	if err != nil {
		return nil, err
	}
	// the request's deadline bounds every call, even when Redis hangs
	opts.ContextTimeoutEnabled = true
	client := goredis.NewClient(opts)
	store := redis.New(client, redis.WithPrefix(prefix))
	if err := store.Load(ctx); err != nil {
		client.Close()
		return nil, err
	}
	return &backend{exec: cas.New(store), store: store, describe: " prefix=" + prefix,
		close: func(context.Context) error { return client.Close() }}, nil
}

func openCouchbase(ctx context.Context, u storeURI) (*backend, error) {
	bucket := u.path
	if bucket == "" {
		bucket = "default"
	}
	auth := gocb.PasswordAuthenticator{Username: u.user, Password: u.password}
	connstr := u.scheme + "://" + u.hosts
	if q := u.query.Encode(); q != "" {
		connstr += "?" + q
	}
	cluster, err := gocb.Connect(connstr, gocb.ClusterOptions{Authenticator: auth})
	if err != nil {
		return nil, err
	}
	closeCluster := func(context.Context) error { return cluster.Close(nil) }
	b := cluster.Bucket(bucket)
	wait := 30 * time.Second
	if d, ok := ctx.Deadline(); ok {
		wait = time.Until(d)
	}
	if err := b.WaitUntilReady(wait, &gocb.WaitUntilReadyOptions{ServiceTypes: []gocb.ServiceType{gocb.ServiceTypeKeyValue}}); err != nil {
		closeCluster(ctx)
		return nil, err
	}
	store, err := couchbase.New(b.DefaultCollection())
	if err != nil {
		closeCluster(ctx)
		return nil, err
	}
	return &backend{exec: cas.New(store), store: store, describe: " bucket=" + bucket, close: closeCluster}, nil
}

// knownStoreScheme reports whether openStore opens URIs of scheme.
func knownStoreScheme(scheme string) bool {
	switch scheme {
	case "redis", "rediss", "mongodb", "mongodb+srv", "couchbase", "couchbases":
		return true
	}
	return false
}
