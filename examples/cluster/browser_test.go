package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// chromiumPath is where Debian's chromium package puts the browser.
const chromiumPath = "/usr/bin/chromium"

// TestBrowser uses the demo as a person would, in headless Chromium: open
// member 1's page, click fire at member 2 more times than the limit, watch
// the panel count exactly the limit, change the limit in the form, fire again and watch the
// new capacity reach every member's panel. It saves a full-page screenshot
// in the test's temporary directory and, when DEMO_SCREENSHOT is set, there.
func TestBrowser(t *testing.T) {
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is missing and CI is set: the demo's browser test needs Debian's chromium (apt-get install chromium)", chromiumPath)
		}
		t.Skipf("%s is missing; apt-get install chromium", chromiumPath)
	}
	d := startDemo(t, Limit{Capacity: 5, RefillPerMinute: 1})
	urls := d.URLs()
	scratch := scratchDir(t)

	actx, cancel := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromiumPath),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(filepath.Join(scratch, "profile")),
		// Chromium also makes a folder of its own in the temporary folder on
		// every start (org.chromium.Chromium.*): keep it in the scratch folder
		// too, so that nothing outlives the test.
		chromedp.Env("TMPDIR="+filepath.Join(scratch, "tmp")),
		chromedp.WindowSize(1360, 900),
	)
	defer cancel()
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer cancel()
	t0 := time.Now()
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("start %s: %v", chromiumPath, err)
	}
	t.Logf("chromium started in %v", time.Since(t0).Round(time.Millisecond))

	// step runs actions with a deadline; on failure it reports what the
	// page shows.
	step := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := chromedp.Do(sctx, steps...); err != nil {
			text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
			t.Fatalf("%s: %v\npage:\n%s", what, err, text)
		}
	}
	// until waits for a JavaScript condition on the page.
	until := func(what, cond string) {
		t.Helper()
		step("wait for "+what, void(chromedp.Poll[bool](cond,
			chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(20*time.Second))))
	}

	step("open member 1", chromedp.Navigate(urls[0]+"/"))
	until("the page to load the members", `document.body.dataset.ready === "1"`)

	// 7 clicks of one request each at member 2: 5 allowed, 2 denied. Each
	// click is done when the page logs its response.
	step("fire 1 per click", chromedp.SetValue(chromedp.ID("count"), "1"))
	for k := 1; k <= 7; k++ {
		step(fmt.Sprintf("click %d on fire at member 2", k), chromedp.Click(chromedp.ID("fire-2")))
		until(fmt.Sprintf("the response to click %d", k), fmt.Sprintf(`logLines.length === %d`, k))
	}
	until("member 2 to count 5 allowed and 2 denied", `
		document.getElementById("denied-2").textContent === "2" &&
		document.getElementById("allowed-2").textContent === "5"`)
	until("every panel to show the empty bucket", all(`$("tokens-%d").textContent === "0" && $("bcap-%d").textContent === "5"`))
	// The headline adds the members' counts for the key up; the plot
	// samples them against what the limit allows.
	until("the headline: the cluster admitted exactly 5 of 7", `
		document.getElementById("headline").textContent.includes("the cluster admitted exactly 5 of 7 requests for demo") &&
		+document.getElementById("headline").dataset.allowed >= 5`)
	until("the plot to show 5 admitted under the limit", `plotSamples.length >= 2 &&
		plotSamples[plotSamples.length - 1].admitted === 5 &&
		plotSamples.every(p => p.admitted <= p.allowed) &&
		document.getElementById("plot-admitted").getAttribute("points").split(" ").length >= 2`)

	// A new limit, stored in the grid, then fired at member 3.
	step("change the limit to 20, 2 per minute",
		// The page refreshes the form from the grid until the user types.
		void(chromedp.Evaluate[bool](`formTouched = true`)),
		chromedp.SetValue(chromedp.ID("capacity"), "20"),
		chromedp.SetValue(chromedp.ID("refill"), "2"),
		chromedp.Click(chromedp.ID("apply")))
	until("every member to apply limit v2", all(`$("lver-%d").textContent === "2"`))
	step("fire 3 at member 3",
		chromedp.SetValue(chromedp.ID("count"), "3"),
		chromedp.Click(chromedp.ID("fire-3")))
	until("every panel to show the bucket at capacity 20, version 2",
		all(`$("bcap-%d").textContent === "20" && $("bver-%d").textContent === "2" && $("brefill-%d").textContent === "2"`))
	until("member 3 to count the 3 requests", `
		+document.getElementById("denied-3").textContent + +document.getElementById("allowed-3").textContent === 3`)
	// A new limit starts a new tally, from the tokens the bucket held.
	until("the headline to count the 3 requests under limit v2", `
		document.getElementById("headline").textContent.startsWith("Under limit v2") &&
		document.getElementById("headline").dataset.total === "3" &&
		plotEvents.some(e => e.label === "limit v2")`)

	// Stop member 3: its panel goes down, the failure mode in force is
	// logged, the others still answer, and the headline keeps member 3's
	// last counts.
	step("stop member 3", chromedp.Click(chromedp.ID("stop-3")))
	until("member 3's panel to show it stopped", `document.getElementById("card-3").classList.contains("down") &&
		document.getElementById("err-3").textContent === "stopped" && plotEvents.some(e => e.label === "member 3 stopped") &&
		logLines[0].includes("stopped member 3") && logLines[0].includes("fail-open")`)
	lines, err := chromedp.Run(ctx, chromedp.Evaluate[int](`logLines.length`))
	if err != nil {
		t.Fatal(err)
	}
	step("fire 2 at member 2", chromedp.SetValue(chromedp.ID("count"), "2"), chromedp.Click(chromedp.ID("fire-2")))
	until("member 2 to answer both", fmt.Sprintf(`logLines.length === %d && logLines[0].includes("fired 2 at member 2") &&
		!logLines[0].includes("error")`, lines+1))
	until("the headline to count 5 requests under limit v2, member 3's included", `document.getElementById("headline").dataset.total === "5"`)
	// Let the log line and the meters settle before the picture.
	time.Sleep(600 * time.Millisecond)

	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	paths := []string{filepath.Join(t.TempDir(), "cluster.png")}
	if p := os.Getenv("DEMO_SCREENSHOT"); p != "" {
		paths = append(paths, p)
	}
	for _, p := range paths {
		if err := os.WriteFile(p, png, 0o644); err != nil {
			t.Error(err)
		}
		t.Logf("screenshot: %s (%d bytes)", p, len(png))
	}
	if len(png) < 8 || string(png[1:4]) != "PNG" {
		t.Error("the screenshot is not a PNG")
	}
}

// scratchDir returns a fresh folder for Chromium's profile and temporary
// files, with the folders profile and tmp in it. Chromium's child processes
// may still write there for a moment after the browser stops, so its
// removal is retried rather than left to t.TempDir, which would fail the
// test.
func scratchDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "cluster-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"profile", "tmp"} {
		if err := os.Mkdir(filepath.Join(dir, sub), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for range 50 {
			if os.RemoveAll(dir) == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Logf("could not remove %s", dir)
	})
	return dir
}

// all returns the JavaScript condition cond, with %d standing for the
// member, required of members 1 to 3.
func all(cond string) string {
	s := `(() => { const $ = (id) => document.getElementById(id); return true`
	for i := 1; i <= 3; i++ {
		s += " && (" + strings.ReplaceAll(cond, "%d", strconv.Itoa(i)) + ")"
	}
	return s + " })()"
}

// void drops an action's value.
func void[T any](a chromedp.Action[T]) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := a(ctx, t)
		return chromedp.Void{}, err
	}
}
