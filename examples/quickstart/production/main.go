// Command production starts a grid member on a private network with its
// three ports secured, as docs/security.md shows: mutual TLS on the owner
// channel, encrypted gossip and Olric's password. The secrets come from files that only the service can read.
package main

import (
	"bytes"
	"context"
	"log"
	"os"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/grid/olric"
)

func main() {
	ctx := context.Background()
	gossipKey, err := os.ReadFile("gossip.key") // 16, 24 or 32 random bytes: openssl rand 32 > gossip.key
	if err != nil {
		log.Fatal(err)
	}
	olricPassword, err := os.ReadFile("olric.password") // long and random: openssl rand -base64 24 > olric.password
	if err != nil {
		log.Fatal(err)
	}

	cfg := olric.DefaultLANConfig()
	cfg.BindAddr = "10.0.4.17"                                                                    // this host's address on the members' private network
	cfg.Peers = []string{"10.0.4.11:3322"}                                                        // gossip ports (BindPort+2) of running members; same list everywhere is fine
	cfg.TLSCertFile, cfg.TLSKeyFile, cfg.TLSCAFile = "member.pem", "member.key", "cluster-ca.pem" // member.pem names 10.0.4.17; or cfg.TLS, or cfg.ChannelSecret
	cfg.GossipKeys = [][]byte{gossipKey}
	cfg.Password = string(bytes.TrimSpace(olricPassword))
	member, err := olric.Start(ctx, cfg) // ErrJoin if no peer let it in within JoinTimeout
	if err != nil {
		log.Fatal(err)
	}
	defer member.Shutdown(ctx)

	limits := bucketgrid.NewManager(member) // limit with it as in the quick start
	log.Printf("member %s up, limits on %T", member.Name(), limits)
	select {} // serve until killed
}
