#!/usr/bin/env python3
"""bench/optimum: nodesmith's plan against the optimum, mix by mix.

For each mix of bench/mixes.py, `nodesmithctl simulate -o json --model` gives the plan and the
model the solver plans with: what a new node can be (NodePool x instance type x capacity type,
the cheapest offering's price, the room left once the pool's DaemonSets are on it) and the
pending pods' shapes (requests, the kinds each may use, at most how many fit one node by their
hostname rules). On that same model this tool computes:

- the LP bound: column generation (master LP over node patterns, HiGHS; pricing: one bounded
  knapsack per node kind, pruned by an upper bound and by dominance, exact by MIP when the
  greedy finds nothing), which proves the LP optimum or gives Farley's bound;
- the best integer plan: the integer master over every generated pattern plus the patterns of
  nodesmith's own plan (HiGHS MIP, time-limited), whose gap to the LP bound is printed.

Zone spread is modelled (nodes are bought in a zone; with maxSkew k over Z zones each zone holds
at least ceil((n - k (Z - 1)) / Z) of the shape's pods); other zonal rules (zonal affinity,
preferences) are left out, so there the "optimum" is a lower bound on what any plan honouring
them can cost.

    python3 bench/optimum.py [--mix SUBSTRING] [--json FILE] [--time-limit S]
"""

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

import highspy
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mixes  # noqa: E402

EPS = 1e-9


def simulate(mix, ctl, plan_ctl=None):
    with tempfile.TemporaryDirectory() as d:
        pf, wf = os.path.join(d, "pools.json"), os.path.join(d, "pods.json")
        with open(pf, "w") as f:
            json.dump({"apiVersion": "v1", "kind": "List", "items": mix["pools"] + [mixes.NODECLASS]}, f)
        with open(wf, "w") as f:
            json.dump({"apiVersion": "v1", "kind": "List", "items": mix["workloads"]}, f)
        t0 = time.perf_counter()
        out = subprocess.run([ctl, "simulate", "--nodepools", pf, "--pods", wf, "-o", "json", "--model",
                              "--no-headroom"], check=True, capture_output=True, text=True, timeout=300)
        secs = time.perf_counter() - t0
        plan = json.loads(out.stdout)
        if plan_ctl:  # another build's plan, measured on this build's model
            t0 = time.perf_counter()
            other = subprocess.run([plan_ctl, "simulate", "--nodepools", pf, "--pods", wf, "-o", "json",
                                    "--no-headroom"], check=True, capture_output=True, text=True, timeout=300)
            secs = time.perf_counter() - t0
            other = json.loads(other.stdout)
            other["model"] = plan["model"]
            plan = other
        return plan, secs


class Model:
    def __init__(self, plan):
        m = plan["model"]
        self.kinds = m["kinds"]
        self.shapes = [s for s in m["shapes"] if s["kinds"]]
        res = sorted({r for s in self.shapes for r in s["requests"]})
        self.res = res
        self.S = len(self.shapes)
        self.req = np.array([[s["requests"].get(r, 0) for r in res] for s in self.shapes], dtype=float)
        self.room = np.array([[k["room"].get(r, 0) for r in res] for k in self.kinds], dtype=float)
        self.price = np.array([k["price"] for k in self.kinds])
        self.cap = np.array([min(len(s["pods"]), s["maxPerNode"] or len(s["pods"])) for s in self.shapes])
        self.compat = [[] for _ in self.kinds]  # kind -> shapes
        for si, s in enumerate(self.shapes):
            for k in s["kinds"]:
                self.compat[k].append(si)
        self.kind_index = {(k["nodepool"], k["instanceType"], k["capacityType"]): i for i, k in enumerate(self.kinds)}
        self.shape_of_pod = {p: si for si, s in enumerate(self.shapes) for p in s["pods"]}
        # rows: one per shape (all its pods), then one per zone of each zone-spread shape: with
        # maxSkew k over Z zones, every zone holds at least ceil((n - k (Z - 1)) / Z) of them
        demand = [len(s["pods"]) for s in self.shapes]
        self.zrow = {}
        for si, s in enumerate(self.shapes):
            k, zs = s.get("zoneSpread", 0), s.get("zones", [])
            if k > 0 and len(zs) > 1:
                low = max(0, math.ceil((len(s["pods"]) - k * (len(zs) - 1)) / len(zs)))
                for z in zs:
                    self.zrow[(si, z)] = len(demand)
                    demand.append(low)
        self.demand = np.array(demand, dtype=float)
        self.zonal = bool(self.zrow)
        self.relaxed = any(s["relaxed"] and not s.get("zoneSpread") for s in self.shapes)
        self.useful = self._prune()
        # what a column is bought as: a kind, in one zone when zones are modelled
        self.slots = [(k, z) for k in self.useful for z in (self.kinds[k]["zones"] if self.zonal else [None])]

    def _prune(self):
        """Kinds not dominated by another kind with the same shapes and zones, no higher price, no less room."""
        groups = {}
        for k, c in enumerate(self.compat):
            if c:
                groups.setdefault((tuple(c), tuple(self.kinds[k]["zones"])), []).append(k)
        keep = []
        for ks in groups.values():
            ks = sorted(ks, key=lambda k: (self.price[k], -self.room[k].sum(), k))
            kept = []
            for k in ks:
                if any(np.all(self.room[j] >= self.room[k]) for j in kept):
                    continue
                kept.append(k)
            keep.extend(kept)
        return sorted(keep)

    def shapes_on(self, k, z):
        """Shapes a node of kind k in zone z may hold."""
        return [s for s in self.compat[k] if z is None or s not in self.spread_shapes() or (s, z) in self.zrow]

    def spread_shapes(self):
        if not hasattr(self, "_spread"):
            self._spread = {s for s, _ in self.zrow}
        return self._spread

    def column(self, z, x):
        col = []
        for s, v in enumerate(x):
            if v:
                col.append((s, float(v)))
                if (s, z) in self.zrow:
                    col.append((self.zrow[(s, z)], float(v)))
        return col

    def pi_eff(self, pi, z):
        """What one pod of each shape is worth on a node in zone z."""
        e = pi[:self.S].copy()
        for (s, zz), row in self.zrow.items():
            if zz == z:
                e[s] += pi[row]
        return e


def solve(costs, cols, rhs, upper=None, integer=False, time_limit=None, maximize=False, rows_le=False):
    """min (or max) costs.x, A x >= rhs (or <= rhs), x >= 0 [<= upper], A given by columns."""
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("random_seed", 1)
    if time_limit:
        h.setOptionValue("time_limit", float(time_limit))
    lp = highspy.HighsLp()
    n, m = len(costs), len(rhs)
    lp.num_col_, lp.num_row_ = n, m
    lp.col_cost_ = np.array([-c for c in costs] if maximize else costs, dtype=float)
    lp.col_lower_ = np.zeros(n)
    lp.col_upper_ = np.array(upper, dtype=float) if upper is not None else np.full(n, highspy.kHighsInf)
    if rows_le:
        lp.row_lower_, lp.row_upper_ = np.full(m, -highspy.kHighsInf), np.array(rhs, dtype=float)
    else:
        lp.row_lower_, lp.row_upper_ = np.array(rhs, dtype=float), np.full(m, highspy.kHighsInf)
    start, index, value = [0], [], []
    for c in cols:
        for i, v in c:
            index.append(i)
            value.append(v)
        start.append(len(index))
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = np.array(start, dtype=np.int32)
    lp.a_matrix_.index_ = np.array(index, dtype=np.int32)
    lp.a_matrix_.value_ = np.array(value, dtype=float)
    if integer:
        lp.integrality_ = [highspy.HighsVarType.kInteger] * n
    h.passModel(lp)
    h.run()
    sol, info = h.getSolution(), h.getInfo()
    obj = info.objective_function_value
    return {"x": np.array(sol.col_value), "dual": np.array(sol.row_dual), "obj": -obj if maximize else obj,
            "bound": (-1 if maximize else 1) * info.mip_dual_bound if integer else None,
            "status": h.modelStatusToString(h.getModelStatus())}


class Master:
    """The restricted master LP, kept from one column-generation iteration to the next: new
    patterns are added as columns and the simplex restarts from the last basis, where building
    the LP again each time made an iteration of the 5 000-pod mix take seconds."""

    def __init__(self, rhs):
        self.h = highspy.Highs()
        self.h.setOptionValue("output_flag", False)
        self.h.setOptionValue("random_seed", 1)
        m = len(rhs)
        self.h.addRows(m, np.array(rhs, dtype=float), np.full(m, highspy.kHighsInf), 0,
                       np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int32), np.zeros(0))
        self.n = 0

    def solve(self, cols, costs):
        new = range(self.n, len(cols))
        if new:
            start, index, value = [], [], []
            for j in new:
                start.append(len(index))
                for i, v in cols[j]:
                    index.append(i)
                    value.append(v)
            k = len(new)
            self.h.addCols(k, np.array(costs[self.n:], dtype=float), np.zeros(k), np.full(k, highspy.kHighsInf),
                           len(index), np.array(start, dtype=np.int32), np.array(index, dtype=np.int32),
                           np.array(value, dtype=float))
            self.n = len(cols)
        self.h.run()
        return {"dual": np.array(self.h.getSolution().row_dual), "obj": self.h.getInfo().objective_function_value}


class CG:
    def __init__(self, model):
        self.m = model
        self.cols, self.costs, self.kind_of, self.seen = [], [], [], set()

    def add(self, k, z, x):
        key = (k, z, tuple(int(v) for v in x))
        if key in self.seen or not any(x):
            return False
        self.seen.add(key)
        self.cols.append(self.m.column(z, x))
        self.costs.append(self.m.price[k])
        self.kind_of.append((k, z))
        return True

    def greedy(self, k, z, pi):
        """A good pattern for kind k in zone z at values pi: shapes by value per unit of their scarcest use."""
        m = self.m
        room = m.room[k].copy()
        x = np.zeros(m.S)
        sh = m.shapes_on(k, z)
        order = sorted(sh, key=lambda s: -pi[s] / max(np.max(m.req[s] / np.maximum(room, 1)), 1e-12))
        for s in order:
            if pi[s] <= EPS:
                continue
            fit = np.min(np.where(m.req[s] > 0, np.floor((room + EPS) / np.maximum(m.req[s], 1e-12)), np.inf))
            c = min(m.cap[s], fit)
            if c >= 1:
                x[s] = c
                room -= c * m.req[s]
        return x

    def exact(self, k, z, pi):
        m = self.m
        sh = [s for s in m.shapes_on(k, z) if pi[s] > EPS]
        if not sh:
            return np.zeros(m.S)
        cols = [[(r, m.req[s][r]) for r in range(len(m.res)) if m.req[s][r]] for s in sh]
        r = solve([pi[s] for s in sh], cols, m.room[k], upper=[m.cap[s] for s in sh], integer=True,
                  maximize=True, rows_le=True, time_limit=5)
        x = np.zeros(m.S)
        for i, s in enumerate(sh):
            x[s] = round(r["x"][i])
        return x

    def bound(self, k, z, pi):
        """An upper bound on what one node of kind k in zone z is worth at values pi."""
        m = self.m
        sh = [s for s in m.shapes_on(k, z) if pi[s] > EPS]
        if not sh:
            return 0.0
        total = sum(pi[s] * m.cap[s] for s in sh)
        for r in range(len(m.res)):
            if all(m.req[s][r] > 0 for s in sh):
                total = min(total, m.room[k][r] * max(pi[s] / m.req[s][r] for s in sh))
        return total

    def run(self, seed_plans=(), max_iter=400, time_limit=120):
        m = self.m
        for k, z in m.slots:  # one single-shape pattern per shape and kind
            for s in m.shapes_on(k, z):
                x = np.zeros(m.S)
                x[s] = 1
                self.add(k, z, self.greedy(k, z, x))
        for k, z, x in seed_plans:
            self.add(k, z, x)
        t0 = time.perf_counter()
        proven = False
        lp = None
        master = Master(m.demand)
        for _ in range(max_iter):
            lp = master.solve(self.cols, self.costs)
            pi = np.maximum(lp["dual"], 0)
            effs = {z: m.pi_eff(pi, z) for z in {z for _, z in m.slots}}
            added = 0
            cand = []
            for k, z in m.slots:
                e = effs[z]
                b = self.bound(k, z, e)
                if b <= m.price[k] * (1 + 1e-7):
                    continue
                x = self.greedy(k, z, e)
                if e @ x > m.price[k] * (1 + 1e-7):
                    added += self.add(k, z, x)
                else:
                    cand.append((b - m.price[k], k, z))
            if not added:
                cand.sort(key=lambda c: -c[0])
                for _, k, z in cand:
                    x = self.exact(k, z, effs[z])
                    if effs[z] @ x > m.price[k] * (1 + 1e-7):
                        added += self.add(k, z, x)
                        if added >= 20:
                            break
            if not added:
                proven = True
                break
            if time.perf_counter() - t0 > time_limit:
                break
        pi = np.maximum(lp["dual"], 0)
        if proven:
            lb = lp["obj"]
        else:  # Farley: z_LP / max_k (value_k / price_k), or the aggregate bound when tighter
            worst = max([1.0] + [self.bound(k, z, m.pi_eff(pi, z)) / m.price[k] for k, z in m.slots])
            lb = max(lp["obj"] / worst, self.aggregate_bound())
        return lb, proven, lp["obj"]

    def aggregate_bound(self):
        """Capacity for the total of each resource, any pod on any kind: a weaker but quick bound."""
        m = self.m
        total = m.req.T @ np.array([len(s["pods"]) for s in m.shapes], dtype=float)
        cols = [[(r, m.room[k][r]) for r in range(len(m.res)) if m.room[k][r]] for k in m.useful]
        return solve([m.price[k] for k in m.useful], cols, total)["obj"]

    def integer(self, time_limit):
        r = solve(self.costs, self.cols, self.m.demand, integer=True, time_limit=time_limit)
        nodes = int(round(sum(r["x"])))
        return r["obj"], nodes, r["status"], self.kind_of, r["x"]


def plan_patterns(model, plan):
    out = []
    for launch in plan["launches"]:
        k = model.kind_index.get((launch["nodepool"], launch["instanceType"], launch["capacityType"]))
        if k is None:
            continue
        z = None
        if model.zonal:
            z = launch["zone"] or model.kinds[k]["zones"][0]
        x = np.zeros(model.S)
        for p in launch["pods"]:
            if p in model.shape_of_pod:
                x[model.shape_of_pod[p]] += 1
        out.append((k, z, x))
    return out


def cg_pattern(model, col):
    x = np.zeros(model.S)
    for i, v in col:
        if i < model.S:
            x[i] = v
    return x


def show_plans(model, ours, optimum):
    """Both plans, node by node (identical nodes counted once): kind, zone, price, use, pods per shape."""
    names = ["%s %s/%s" % (s["pods"][0].rsplit("-", 1)[0], s["requests"].get("cpu", 0),
                           s["requests"].get("memory", 0) >> 20) for s in model.shapes]

    def lines(nodes):
        seen = {}
        for k, z, x, n in nodes:
            key = (k, z, tuple(int(v) for v in x))
            seen[key] = seen.get(key, 0) + n
        for (k, z, x), n in sorted(seen.items(), key=lambda e: (-model.price[e[0][0]], e[0])):
            kind = model.kinds[k]
            use = np.array(x, dtype=float) @ model.req
            pct = " ".join("%s %3.0f%%" % (r[:3], 100 * use[i] / model.room[k][i])
                           for i, r in enumerate(model.res) if r in ("cpu", "memory") and model.room[k][i])
            pods = ", ".join("%s x%d" % (names[s], v) for s, v in enumerate(x) if v)
            print("    %3d x %-14s %-10s %-11s $%7.4f  %s  %s" % (n, kind["instanceType"], kind["capacityType"],
                                                             z or "-", model.price[k], pct, pods))
    print("  nodesmith:")
    lines([(k, z, x, 1) for k, z, x in ours])
    print("  optimum:")
    lines(optimum)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mix", help="only mixes whose name contains this")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--time-limit", type=float, default=30, help="integer master, seconds per mix")
    ap.add_argument("--cg-time", type=float, default=180, help="column generation, seconds per mix")
    ap.add_argument("--ctl", default=os.path.join(os.environ.get("BUILD", "build"), "nodesmithctl"))
    ap.add_argument("--plan-ctl", help="measure this nodesmithctl's plans (e.g. an older build) on --ctl's model")
    ap.add_argument("--show", action="store_true", help="print both plans' nodes: kind, zone, pods per shape")
    a = ap.parse_args()
    rows = []
    print("mix                      pods  nodesmith $/h (nodes)  optimum $/h (nodes)  LP bound   gap    ratio  "
          "to int  plan ms\n  (gap: optimum over bound; an LP bound marked * is column generation's proven LP optimum;"
          " an optimum marked ~ is the best integer plan found, not proven, and its ratio, marked b, is\n"
          "  against the LP bound; \"to int\": against the best integer plan found)")
    for mix in mixes.MIXES:
        if a.mix and a.mix.lower() not in mix["name"].lower():
            continue
        plan, secs = simulate(mix, a.ctl, a.plan_ctl)
        model = Model(plan)
        cg = CG(model)
        seeds = plan_patterns(model, plan)
        lb, proven, lp_obj = cg.run(seed_plans=seeds, time_limit=a.cg_time)
        opt, opt_nodes, status, kind_of, xs = cg.integer(a.time_limit)
        cost = plan["summary"]["hourlyCost"]
        unsched = plan["summary"]["unschedulable"]
        opt = min(opt, cost) if unsched == 0 else opt
        gap = opt / lb - 1 if lb > 0 else 0
        # the integer plan is the optimum only when the MIP proved it; otherwise the only proven
        # figure is the LP bound, and the ratio is taken against it
        mip_proven = status == "Optimal"
        ref = opt if mip_proven else lb
        row = {"mix": mix["name"], "pods": sum(len(x["pods"]) for x in model.shapes), "cost": cost, "nodes": len(plan["launches"]),
               "unschedulable": unsched, "optimum": opt, "optimum_nodes": opt_nodes, "lp_bound": lb,
               "lp_proven": proven, "gap": gap, "mip_proven": mip_proven,
               "ratio": cost / ref if ref > 0 else float("nan"),
               "ratio_to_integer": cost / opt if opt > 0 else float("nan"),
               "ratio_to_bound": cost / lb if lb > 0 else float("nan"), "relaxed_topology": model.relaxed,
               "simulate_seconds": secs, "kinds": len(model.kinds), "useful_kinds": len(model.useful),
               "patterns": len(cg.cols), "mip_status": status}
        rows.append(row)
        print("%-22s %6d  %8.2f (%4d)        %8.2f%s(%4d)     %8.2f%s %5.2f%%  %5.3f%s %5.3f  %7.0f%s" % (
            mix["name"], row["pods"], cost, row["nodes"], opt, " " if mip_proven else "~", opt_nodes, lb,
            "*" if proven else " ", 100 * gap, row["ratio"], " " if mip_proven else "b", row["ratio_to_integer"],
            secs * 1000,
            "" if unsched == 0 else "  (%d unschedulable)" % unsched), flush=True)
        if a.show:
            show_plans(model, seeds, [(kind_of[i][0], kind_of[i][1], cg_pattern(model, cg.cols[i]), int(round(v)))
                                      for i, v in enumerate(xs) if round(v) > 0])
    if rows:
        ratios = [r["ratio"] for r in rows]
        print("mean ratio %.3f, worst %.3f (%s)" % (sum(ratios) / len(ratios), max(ratios),
                                                   max(rows, key=lambda r: r["ratio"])["mix"]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
