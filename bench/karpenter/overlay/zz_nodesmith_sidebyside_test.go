//go:build test_performance

// Laid over sigs.k8s.io/karpenter/pkg/controllers/provisioning/scheduling by
// bench/bench_karpenter.py (go test -overlay): Karpenter's own scheduling benchmark setup
// (setupScheduler: one NodePool, fake.InstanceTypes(400); makeDiversePods: the five pod groups)
// timed per size, with the cost of the plan (each NodeClaim at its cheapest compatible
// offering) that the benchmark itself does not report. The generator is reseeded with 42 before
// each size so every size gets the same pods in every run.
//
// With SIDE_BY_SIDE_PODS_DIR set, each size's pods are also written to DIR/pods-N.json
// (SIDE_BY_SIDE_RUNS=0: only written, nothing solved)
// (bench/scheduling --pods-from reads them): per pod its kind (which of makeDiversePods' groups
// made it), namespace, cpu and memory requests, labels, and its topology spread, required pod
// affinity and anti-affinity terms as Karpenter sees them. A pod carrying anything else that
// scheduling depends on (node selectors, node affinity, tolerations, preferred terms, selector
// expressions, other namespaces, minDomains, ...) stops the test, so the file never drops a
// constraint Karpenter honoured.
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
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sigs.k8s.io/karpenter/pkg/operator/injection"
	"sigs.k8s.io/karpenter/pkg/operator/options"
	"sigs.k8s.io/karpenter/pkg/test"
	"sigs.k8s.io/karpenter/pkg/controllers/provisioning/scheduling"
)

type nodesmithRow struct {
	Pods          int     `json:"pods"`
	Seconds       float64 `json:"seconds"`
	CPUSeconds    float64 `json:"cpu_seconds"` // the process's user + system time over Solve (all its threads)
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

type nodesmithTerm struct {
	TopologyKey string            `json:"topologyKey"`
	MaxSkew     int32             `json:"maxSkew,omitempty"`
	MatchLabels map[string]string `json:"matchLabels"`
}

type nodesmithPod struct {
	Name         string            `json:"name"`
	Kind         string            `json:"kind"`
	Namespace    string            `json:"namespace"`
	CPUMilli     int64             `json:"cpuMillis"`
	MemoryBytes  int64             `json:"memoryBytes"`
	Labels       map[string]string `json:"labels"`
	Spread       []nodesmithTerm   `json:"topologySpread,omitempty"`
	Affinity     []nodesmithTerm   `json:"podAffinity,omitempty"`
	AntiAffinity []nodesmithTerm   `json:"podAntiAffinity,omitempty"`
}

func nodesmithSelector(sel *metav1.LabelSelector) (map[string]string, error) {
	if sel == nil || len(sel.MatchExpressions) > 0 {
		return nil, fmt.Errorf("a label selector that is absent or has matchExpressions")
	}
	return sel.MatchLabels, nil
}

func nodesmithPodTerms(terms []corev1.PodAffinityTerm) ([]nodesmithTerm, error) {
	var out []nodesmithTerm
	for _, a := range terms {
		if len(a.Namespaces) > 0 || a.NamespaceSelector != nil || len(a.MatchLabelKeys) > 0 || len(a.MismatchLabelKeys) > 0 {
			return nil, fmt.Errorf("a pod affinity term with namespaces or label keys")
		}
		m, err := nodesmithSelector(a.LabelSelector)
		if err != nil {
			return nil, err
		}
		out = append(out, nodesmithTerm{TopologyKey: a.TopologyKey, MatchLabels: m})
	}
	return out, nil
}

// nodesmithExport is one pod as bench/scheduling reads it; an error names what it cannot carry.
func nodesmithExport(p *corev1.Pod) (nodesmithPod, error) {
	out := nodesmithPod{Name: p.Name, Namespace: p.Namespace, Labels: p.Labels}
	s := &p.Spec
	if len(s.NodeSelector) > 0 || len(s.Tolerations) > 0 || len(s.InitContainers) > 0 || s.Overhead != nil ||
		s.NodeName != "" || len(s.Volumes) > 0 || len(s.ResourceClaims) > 0 || s.PriorityClassName != "" || s.Priority != nil {
		return out, fmt.Errorf("node selector, tolerations, init containers, overhead, volumes, claims or priority")
	}
	if s.Resources != nil && (len(s.Resources.Requests) > 0 || len(s.Resources.Limits) > 0) {
		return out, fmt.Errorf("pod-level resources")
	}
	for _, c := range s.Containers {
		for name, q := range c.Resources.Requests {
			switch name {
			case corev1.ResourceCPU:
				out.CPUMilli += q.MilliValue()
			case corev1.ResourceMemory:
				out.MemoryBytes += q.Value()
			default:
				return out, fmt.Errorf("a request for %s", name)
			}
		}
		for _, port := range c.Ports {
			if port.HostPort != 0 {
				return out, fmt.Errorf("a host port")
			}
		}
	}
	for _, c := range s.TopologySpreadConstraints {
		if c.WhenUnsatisfiable != corev1.DoNotSchedule || c.MinDomains != nil || c.NodeAffinityPolicy != nil ||
			c.NodeTaintsPolicy != nil || len(c.MatchLabelKeys) > 0 {
			return out, fmt.Errorf("a topology spread constraint beyond maxSkew, topologyKey and a DoNotSchedule selector")
		}
		m, err := nodesmithSelector(c.LabelSelector)
		if err != nil {
			return out, err
		}
		out.Spread = append(out.Spread, nodesmithTerm{TopologyKey: c.TopologyKey, MaxSkew: c.MaxSkew, MatchLabels: m})
	}
	var err error
	if a := s.Affinity; a != nil {
		if a.NodeAffinity != nil {
			return out, fmt.Errorf("node affinity")
		}
		if pa := a.PodAffinity; pa != nil {
			if len(pa.PreferredDuringSchedulingIgnoredDuringExecution) > 0 {
				return out, fmt.Errorf("preferred pod affinity")
			}
			if out.Affinity, err = nodesmithPodTerms(pa.RequiredDuringSchedulingIgnoredDuringExecution); err != nil {
				return out, err
			}
		}
		if pa := a.PodAntiAffinity; pa != nil {
			if len(pa.PreferredDuringSchedulingIgnoredDuringExecution) > 0 {
				return out, fmt.Errorf("preferred pod anti-affinity")
			}
			if out.AntiAffinity, err = nodesmithPodTerms(pa.RequiredDuringSchedulingIgnoredDuringExecution); err != nil {
				return out, err
			}
		}
	}
	// the group makeDiversePods built it in, named as bench/scheduling names its groups
	out.Kind = "plain"
	switch {
	case len(out.Spread) == 1 && out.Spread[0].TopologyKey == corev1.LabelTopologyZone:
		out.Kind = "spread-zone"
	case len(out.Spread) == 1 && out.Spread[0].TopologyKey == corev1.LabelHostname:
		out.Kind = "spread-host"
	case len(out.Affinity) == 1 && out.Affinity[0].TopologyKey == corev1.LabelTopologyZone:
		out.Kind = "affinity-zone"
	case len(out.AntiAffinity) == 1 && out.AntiAffinity[0].TopologyKey == corev1.LabelHostname:
		out.Kind = "anti-host"
	case len(out.Spread)+len(out.Affinity)+len(out.AntiAffinity) > 0:
		out.Kind = "other"
	}
	return out, nil
}

func nodesmithWritePods(dir string, pods []*corev1.Pod) error {
	out := struct {
		Source string         `json:"source"`
		Seed   int            `json:"seed"`
		Pods   []nodesmithPod `json:"pods"`
	}{Source: "sigs.k8s.io/karpenter scheduling_benchmark_test.go makeDiversePods", Seed: 42}
	for _, p := range pods {
		x, err := nodesmithExport(p)
		if err != nil {
			return fmt.Errorf("pod %s carries %s, which the pods file cannot express", p.Name, err)
		}
		out.Pods = append(out.Pods, x)
	}
	b, err := json.Marshal(out)
	if err != nil {
		return err
	}
	path := fmt.Sprintf("%s/pods-%d.json", dir, len(pods))
	if err := os.WriteFile(path+".tmp", b, 0o644); err != nil {
		return err
	}
	return os.Rename(path+".tmp", path)
}

func nodesmithCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return math.NaN()
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

func TestNodesmithSideBySide(t *testing.T) {
	sizes := nodesmithEnvInts("SIDE_BY_SIDE_SIZES", []int{1, 50, 100, 500, 1000, 2000, 5000, 10000, 20000})
	runs := nodesmithEnvInts("SIDE_BY_SIDE_RUNS", []int{3})[0]
	budget := nodesmithEnvInts("SIDE_BY_SIDE_BUDGET_SECONDS", []int{120})[0]
	podsDir := os.Getenv("SIDE_BY_SIDE_PODS_DIR")
	for _, n := range sizes {
		if podsDir != "" {
			r = rand.New(rand.NewSource(42))
			if err := nodesmithWritePods(podsDir, makeDiversePods(n)); err != nil {
				t.Fatalf("writing the pods of size %d: %s", n, err)
			}
		}
		if runs == 0 { // the pods only
			continue
		}
		row := nodesmithRow{Pods: n, Cost: math.NaN()}
		var times, cpus []float64
		for i := 0; i < runs; i++ {
			r = rand.New(rand.NewSource(42))
			pods := makeDiversePods(n) // the very pods written above: same seed, same draws
			c := options.ToContext(injection.WithControllerName(context.Background(), "provisioner"), test.Options())
			s, err := setupScheduler(c, pods, scheduling.NumConcurrentReconciles(5))
			if err != nil {
				t.Fatalf("creating scheduler: %s", err)
			}
			start, cpu0 := time.Now(), nodesmithCPU()
			res, err := s.Solve(c, pods)
			el := time.Since(start).Seconds()
			cpus = append(cpus, nodesmithCPU()-cpu0)
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
		sort.Float64s(cpus)
		row.Runs = len(times)
		row.Seconds = times[len(times)/2]
		row.CPUSeconds = cpus[len(cpus)/2]
		b, _ := json.Marshal(row)
		fmt.Printf("KARPENTER_SIDE_BY_SIDE %s\n", b)
	}
}
