//go:build test_performance

// Laid over sigs.k8s.io/karpenter/pkg/controllers/provisioning/scheduling by
// bench/bench_karpenter.py (go test -overlay): Karpenter's own scheduling benchmark setup
// (setupScheduler: one NodePool, fake.InstanceTypes(400); makeDiversePods: the five pod groups)
// timed per size, with the cost of the plan (each NodeClaim at its cheapest compatible
// offering) that the benchmark itself does not report. The generator is reseeded with 42 before
// each size so every size gets the same pods in every run.
package scheduling_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/karpenter/pkg/operator/injection"
	"sigs.k8s.io/karpenter/pkg/operator/options"
	"sigs.k8s.io/karpenter/pkg/test"
	"sigs.k8s.io/karpenter/pkg/controllers/provisioning/scheduling"
)

type nodesmithRow struct {
	Pods          int     `json:"pods"`
	Seconds       float64 `json:"seconds"`
	Runs          int     `json:"runs"`
	Nodes         int     `json:"nodes"`
	Cost          float64 `json:"cost"`
	Unschedulable int     `json:"unschedulable"`
}

func nodesmithEnvInts(name string, def []int) []int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err == nil {
			out = append(out, n)
		}
	}
	return out
}

func TestNodesmithSideBySide(t *testing.T) {
	sizes := nodesmithEnvInts("SIDE_BY_SIDE_SIZES", []int{1, 50, 100, 500, 1000, 2000, 5000, 10000, 20000})
	runs := nodesmithEnvInts("SIDE_BY_SIDE_RUNS", []int{3})[0]
	budget := nodesmithEnvInts("SIDE_BY_SIDE_BUDGET_SECONDS", []int{120})[0]
	for _, n := range sizes {
		row := nodesmithRow{Pods: n, Cost: math.NaN()}
		var times []float64
		for i := 0; i < runs; i++ {
			r = rand.New(rand.NewSource(42))
			pods := makeDiversePods(n)
			c := options.ToContext(injection.WithControllerName(context.Background(), "provisioner"), test.Options())
			s, err := setupScheduler(c, pods, scheduling.NumConcurrentReconciles(5))
			if err != nil {
				t.Fatalf("creating scheduler: %s", err)
			}
			start := time.Now()
			res, err := s.Solve(c, pods)
			el := time.Since(start).Seconds()
			if err != nil {
				t.Fatalf("solve %d pods: %s", n, err)
			}
			times = append(times, el)
			if i == 0 {
				row.Nodes = len(res.NewNodeClaims)
				row.Unschedulable = len(res.PodErrors)
				row.Cost = 0
				for _, nc := range res.NewNodeClaims {
					best := math.Inf(1)
					for _, it := range nc.InstanceTypeOptions {
						for _, o := range it.Offerings {
							if o.Available && o.Price < best && nc.Requirements.Intersects(o.Requirements) == nil {
								best = o.Price
							}
						}
					}
					row.Cost += best
				}
			}
			// the largest sizes take long on a small machine: fewer runs once over budget
			if el*float64(runs) > float64(budget) {
				break
			}
		}
		sort.Float64s(times)
		row.Runs = len(times)
		row.Seconds = times[len(times)/2]
		b, _ := json.Marshal(row)
		fmt.Printf("KARPENTER_SIDE_BY_SIDE %s\n", b)
	}
}
