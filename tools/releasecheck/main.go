// Command releasecheck proves that the modules of this repository work as
// published modules before any of them is tagged. It builds the module zips
// of every module at a version from the committed tree (git HEAD, as a tag
// would publish it), lays them out as a GOPROXY directory, and then builds,
// outside the repository and without its go.work or replace directives, a
// fresh module that requires only grid/olric at that version.
//
// Run it from anywhere in the repository (about 30 s with a warm build
// cache; the first run compiles Olric):
//
//	cd tools/releasecheck && GOWORK=off go run . -version v0.1.0
//
// With -all it also resolves every package of every module through the
// proxy (go list -deps), so a module whose requirements do not resolve once
// tagged is caught too. -keep leaves the proxy and the consumer in place.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	modzip "golang.org/x/mod/zip"
)

// rootPath is the path of the repository's root module; every published
// module's path starts with it.
const rootPath = "github.com/bucketgrid/bucketgrid"

// unpublished are the folders whose modules are never published: tools and
// peer benchmarks.
var unpublished = []string{"tools", "bench"}

func main() {
	version := flag.String("version", "v0.1.0", "the version to publish every module at")
	all := flag.Bool("all", false, "also resolve every package of every module through the proxy")
	keep := flag.Bool("keep", false, "keep the proxy and consumer directories")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("releasecheck: ")
	if err := run(*version, *all, *keep); err != nil {
		log.Fatal(err)
	}
	fmt.Println("PASS")
}

// mod is one module of the repository.
type mod struct {
	path string // module path
	dir  string // folder relative to the repository root, "" for the root
}

func run(version string, all, keep bool) error {
	if !semver.IsValid(version) || semver.Canonical(version) != version || semver.Build(version) != "" {
		return fmt.Errorf("invalid version %q: want a tag such as v0.1.0", version)
	}
	repo, err := output("", "git", "rev-parse", "--show-toplevel")
	if err != nil {
		return err
	}
	mods, err := modules(repo)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "releasecheck-")
	if err != nil {
		return err
	}
	if keep {
		log.Printf("keeping %s", tmp)
	} else {
		defer removeAll(tmp)
	}
	// the committed tree, as a tag publishes it (git archive also works in a
	// worktree, where CreateFromVCS does not find the repository)
	tree := filepath.Join(tmp, "tree")
	if err := os.MkdirAll(tree, 0o755); err != nil {
		return err
	}
	if _, err := output(repo, "sh", "-c", "git archive --format=tar HEAD | tar -x -C \"$0\"", tree); err != nil {
		return err
	}
	proxy := filepath.Join(tmp, "proxy")
	for _, m := range mods {
		if err := publish(tree, proxy, m, version); err != nil {
			return fmt.Errorf("%s: %w", m.path, err)
		}
		log.Printf("published %s@%s", m.path, version)
	}
	modcache, unlock, err := moduleCache()
	if err != nil {
		return err
	}
	defer unlock()
	env, err := consumerEnv(modcache, proxy)
	if err != nil {
		return err
	}
	consumer := filepath.Join(tmp, "consumer")
	if err := os.MkdirAll(consumer, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(consumer, "go.mod"), []byte("module example.com/consumer\n\ngo 1.26.0\n"), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(consumer, "main.go"), []byte(consumerMain), 0o644); err != nil {
		return err
	}
	olric := rootPath + "/grid/olric"
	start := time.Now()
	for _, args := range [][]string{
		{"get", olric + "@" + version},
		{"mod", "tidy"},
		{"build", "-o", os.DevNull, "."},
		{"vet", "."},
	} {
		if _, err := goCmd(consumer, env, args...); err != nil {
			return err
		}
	}
	// the consumer asked for grid/olric alone; the root came with it
	gomod, err := os.ReadFile(filepath.Join(consumer, "go.mod"))
	if err != nil {
		return err
	}
	f, err := modfile.Parse("go.mod", gomod, nil)
	if err != nil {
		return err
	}
	// it imports the root package too, so tidy lists the root as direct: at
	// the version grid/olric requires, the one released with it
	for _, r := range f.Require {
		if r.Mod.Path != olric && r.Mod.Path != rootPath && !r.Indirect {
			return fmt.Errorf("the consumer requires %s, which it never asked for", r.Mod)
		}
		if strings.HasPrefix(r.Mod.Path, rootPath) && r.Mod.Version != version {
			return fmt.Errorf("the consumer resolved %s, want %s", r.Mod, version)
		}
	}
	log.Printf("a module requiring only %s@%s builds (%v)", olric, version, time.Since(start).Round(time.Second))
	if all {
		for _, m := range mods {
			if _, err := goCmd(consumer, env, "get", m.path+"@"+version); err != nil {
				return err
			}
			if _, err := goCmd(consumer, env, "list", "-deps", "-test", m.path+"/..."); err != nil {
				return err
			}
			log.Printf("every package of %s@%s resolves", m.path, version)
		}
	}
	return nil
}

// consumerMain is the fresh module's program: it starts nothing (no port
// is opened), but uses both the root and grid/olric so that both link.
const consumerMain = `package main

import (
	"context"
	"fmt"
	"time"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/grid/olric"
)

func main() {
	cfg := olric.DefaultLocalConfig()
	if false { // linked, never run: starting a member opens ports
		m, _ := olric.Start(context.Background(), cfg)
		_ = bucketgrid.NewManager(m)
	}
	c, _ := core.NewConfig(core.Greedy(10, 10, time.Second))
	b, _ := bucketgrid.NewLocal(c)
	fmt.Println(b.TryConsume(context.Background(), 1))
}
`

// modules lists the repository's published modules: every go.mod outside
// the unpublished folders.
func modules(repo string) ([]mod, error) {
	files, err := output(repo, "git", "ls-files", "--", "go.mod", "*/go.mod")
	if err != nil {
		return nil, err
	}
	var mods []mod
	for _, f := range strings.Fields(files) {
		dir := filepath.ToSlash(filepath.Dir(f))
		if dir == "." {
			dir = ""
		}
		if skip(dir) {
			continue
		}
		data, err := os.ReadFile(filepath.Join(repo, f))
		if err != nil {
			return nil, err
		}
		p := modfile.ModulePath(data)
		if want := strings.TrimSuffix(rootPath+"/"+dir, "/"); p != want {
			return nil, fmt.Errorf("%s declares module %s, want %s (a tag dir/vX.Y.Z publishes the folder's module)", f, p, want)
		}
		mods = append(mods, mod{p, dir})
	}
	sort.Slice(mods, func(i, j int) bool { return mods[i].dir < mods[j].dir })
	if len(mods) == 0 || mods[0].dir != "" {
		return nil, errors.New("no root module")
	}
	return mods, nil
}

func skip(dir string) bool {
	for _, u := range unpublished {
		if dir == u || strings.HasPrefix(dir, u+"/") {
			return true
		}
	}
	return false
}

// publish writes m at version into the GOPROXY directory proxy, from the
// committed tree extracted at tree.
func publish(tree, proxy string, m mod, version string) error {
	escaped, err := module.EscapePath(m.path)
	if err != nil {
		return err
	}
	at := filepath.Join(proxy, filepath.FromSlash(escaped), "@v")
	if err := os.MkdirAll(at, 0o755); err != nil {
		return err
	}
	var zip bytes.Buffer
	dir := filepath.Join(tree, filepath.FromSlash(m.dir))
	if err := modzip.CreateFromDir(&zip, module.Version{Path: m.path, Version: version}, dir); err != nil {
		return err
	}
	gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, time.Now().UTC()})
	if err != nil {
		return err
	}
	for name, data := range map[string][]byte{
		"list":            []byte(version + "\n"),
		version + ".info": info,
		version + ".mod":  gomod,
		version + ".zip":  zip.Bytes(),
	} {
		if err := os.WriteFile(filepath.Join(at, name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// moduleCache returns the consumer's module cache, locked for this run:
// one per user, kept between runs so that the dependencies are extracted
// once and the build cache recognises their folders, with this
// repository's modules removed so that no earlier run's zips are reused.
func moduleCache() (dir string, unlock func(), err error) {
	base, err := os.UserCacheDir()
	if err != nil {
		return "", nil, err
	}
	dir = filepath.Join(base, "bucketgrid-releasecheck", "modcache")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", nil, err
	}
	lock, err := os.OpenFile(dir+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", nil, err
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		lock.Close()
		return "", nil, err
	}
	unlock = func() { lock.Close() }
	for _, p := range []string{filepath.Join(dir, "cache", "download", rootPath), filepath.Join(dir, rootPath+"@*")} {
		matches, _ := filepath.Glob(p)
		for _, m := range matches {
			if err := removeAll(m); err != nil {
				unlock()
				return "", nil, err
			}
		}
	}
	// the extracted modules of this repository sit beside each other under
	// github.com/bucketgrid as bucketgrid@v… and bucketgrid/grid/olric@v…
	if err := removeAll(filepath.Join(dir, rootPath)); err != nil {
		unlock()
		return "", nil, err
	}
	return dir, unlock, nil
}

// removeAll removes p, read-only folders of a module cache included.
func removeAll(p string) error {
	_ = filepath.WalkDir(p, func(q string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(q, 0o755)
		}
		return nil
	})
	return os.RemoveAll(p)
}

// consumerEnv is the environment of a module outside the repository that
// finds this repository's modules only in proxy: no workspace, the module
// cache modcache, this machine's module cache and proxy for everything
// else, no checksum database for the unpublished path, and no module index.
func consumerEnv(modcache, proxy string) ([]string, error) {
	cache, err := output("", "go", "env", "GOMODCACHE")
	if err != nil {
		return nil, err
	}
	upstream, err := output("", "go", "env", "GOPROXY")
	if err != nil {
		return nil, err
	}
	goproxy := "file://" + filepath.ToSlash(proxy) + ",file://" + filepath.ToSlash(filepath.Join(cache, "cache", "download"))
	if upstream != "" && upstream != "off" {
		goproxy += "," + upstream
	}
	env := os.Environ()
	env = append(env,
		"GOWORK=off",
		"GOFLAGS=-mod=mod -modcacherw",
		"GOPROXY="+goproxy,
		"GONOSUMDB="+rootPath,
		"GOMODCACHE="+modcache,
		// The go command indexes the packages of a module cache folder once,
		// keyed by module and version, trusting that the folder never
		// changes; here it does (the same version is rebuilt from another
		// commit), so the index must not be used.
		"GODEBUG=goindex=0",
	)
	return env, nil
}

// goCmd runs the go command in dir with env.
func goCmd(dir string, env []string, args ...string) (string, error) {
	cmd := exec.Command("go", args...)
	cmd.Dir, cmd.Env = dir, env
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// output runs a command and returns its trimmed standard output.
func output(dir string, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(string(out)), nil
}
