#!/usr/bin/env python3
"""Writes nodesmith's Grafana dashboards (packaging/grafana/*.json) from the panels below:
`python3 packaging/grafana/generate.py`. Each dashboard takes a Prometheus data source and the
NodePool, zone and capacity type as variables. tests/integration/test_observability.py checks
that the JSON files are what this script writes and that every metric they query is on the
coordinator's /metrics."""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
POOL = 'nodepool=~"$nodepool",zone=~"$zone",capacity_type=~"$capacity_type"'


def variables():
    def q(name, label):
        return {"name": name, "label": label, "type": "query", "datasource": {"type": "prometheus", "uid": "${datasource}"},
                "query": {"query": f"label_values(nodesmith_fleet_nodes, {name})", "refId": name},
                "definition": f"label_values(nodesmith_fleet_nodes, {name})",
                "includeAll": True, "multi": True, "allValue": ".*", "refresh": 2,
                "current": {"text": "All", "value": "$__all"}}
    return [{"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
             "current": {}, "hide": 0},
            q("nodepool", "NodePool"), q("zone", "Zone"), q("capacity_type", "Capacity type")]


def panel(title, exprs, unit="short", kind="timeseries", desc="", stack=False):
    """exprs: [(PromQL, legend)]."""
    p = {"title": title, "type": kind, "description": desc,
         "datasource": {"type": "prometheus", "uid": "${datasource}"},
         "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
         "targets": [{"refId": chr(65 + i), "expr": e, "legendFormat": lg,
                      "datasource": {"type": "prometheus", "uid": "${datasource}"}} for i, (e, lg) in enumerate(exprs)]}
    if kind == "timeseries":
        p["fieldConfig"]["defaults"]["custom"] = {"stacking": {"mode": "normal" if stack else "none"}, "fillOpacity": 20 if stack else 0}
    return p


def quantiles(metric, what):
    return [(f'histogram_quantile({q}, sum by (le) (rate({metric}_bucket[$__rate_interval])))', f"p{int(q * 100)} {what}")
            for q in (0.5, 0.9, 0.99)]


DASHBOARDS = {
    "nodesmith-capacity": ("nodesmith / capacity and cost", [
        panel("Nodes", [(f"sum(nodesmith_fleet_nodes{{{POOL}}})", "nodes")], kind="stat"),
        panel("Cost (USD/h)", [(f"sum(nodesmith_fleet_cost_dollars_per_hour{{{POOL}}})", "USD/h")], unit="currencyUSD", kind="stat"),
        panel("Cost, 30 days at this rate", [(f"sum(nodesmith_fleet_cost_dollars_per_hour{{{POOL}}}) * 720", "USD")],
              unit="currencyUSD", kind="stat"),
        panel("CPU requested / allocatable", [(f'sum(nodesmith_fleet_requested{{{POOL},resource="cpu"}}) / '
                                               f'sum(nodesmith_fleet_allocatable{{{POOL},resource="cpu"}})', "cpu")],
              unit="percentunit", kind="gauge"),
        panel("Nodes by NodePool", [(f"sum by (nodepool) (nodesmith_fleet_nodes{{{POOL}}})", "{{nodepool}}")], stack=True),
        panel("Nodes by instance type", [(f"sum by (instance_type) (nodesmith_fleet_nodes{{{POOL}}})", "{{instance_type}}")], stack=True),
        panel("Nodes by zone and capacity type", [(f"sum by (zone, capacity_type) (nodesmith_fleet_nodes{{{POOL}}})",
                                                   "{{zone}} {{capacity_type}}")], stack=True),
        panel("Cost by NodePool and capacity type (USD/h)", [(f"sum by (nodepool, capacity_type) (nodesmith_fleet_cost_dollars_per_hour{{{POOL}}})",
                                                             "{{nodepool}} {{capacity_type}}")], unit="currencyUSD", stack=True),
        panel("Cost by instance type (USD/h)", [(f"sum by (instance_type) (nodesmith_fleet_cost_dollars_per_hour{{{POOL}}})",
                                                "{{instance_type}}")], unit="currencyUSD", stack=True),
        panel("CPU cores: allocatable and requested, by NodePool", [
            (f'sum by (nodepool) (nodesmith_fleet_allocatable{{{POOL},resource="cpu"}})', "{{nodepool}} allocatable"),
            (f'sum by (nodepool) (nodesmith_fleet_requested{{{POOL},resource="cpu"}})', "{{nodepool}} requested")]),
        panel("Memory: allocatable and requested, by NodePool", [
            (f'sum by (nodepool) (nodesmith_fleet_allocatable{{{POOL},resource="memory"}})', "{{nodepool}} allocatable"),
            (f'sum by (nodepool) (nodesmith_fleet_requested{{{POOL},resource="memory"}})', "{{nodepool}} requested")], unit="bytes"),
    ]),
    "nodesmith-provisioning": ("nodesmith / pending pods and provisioning", [
        panel("Pending pods", [("max(nodesmith_pending_pods)", "unschedulable")], kind="stat"),
        panel("Oldest pending pod", [("max(nodesmith_pending_pod_oldest_seconds)", "age")], unit="s", kind="stat"),
        panel("Instances in flight", [("max(nodesmith_instances_in_flight)", "in flight")], kind="stat"),
        panel("Pending pods and in-flight instances", [("max(nodesmith_pending_pods)", "pending pods"),
                                                       ("max(nodesmith_instances_in_flight)", "instances in flight")]),
        panel("Launch to Node registered", quantiles("nodesmith_node_registration_duration_seconds", "registration"), unit="s"),
        panel("Instances launched and launch errors (per minute)", [
            ("sum(rate(nodesmith_instances_launched_total[$__rate_interval])) * 60", "launched"),
            ("sum(rate(nodesmith_launch_errors_total[$__rate_interval])) * 60", "launch errors"),
            ("sum(rate(nodesmith_insufficient_capacity_total[$__rate_interval])) * 60", "insufficient capacity")]),
        panel("Provisioning rounds (per minute)", [("sum(rate(nodesmith_provisioning_rounds_total[$__rate_interval])) * 60", "rounds")]),
        panel("Instances terminated (per hour)", [
            ("sum(rate(nodesmith_instances_terminated_total[$__rate_interval])) * 3600", "after drain or deletion"),
            ("sum(rate(nodesmith_instances_terminated_unregistered_total[$__rate_interval])) * 3600", "never registered")]),
    ]),
    "nodesmith-disruption": ("nodesmith / disruption", [
        panel("Disruption decisions by method (per hour)", [
            ("sum by (method) (rate(nodesmith_disruption_decisions_total[$__rate_interval])) * 3600", "{{method}}")], stack=True),
        panel("Nodes draining by reason", [("sum by (reason) (nodesmith_nodes_draining)", "{{reason}}")], stack=True),
        panel("Disruption budget by NodePool and reason (nodes at once)", [
            ('max by (nodepool, reason) (nodesmith_nodepool_disruption_budget{nodepool=~"$nodepool"})', "{{nodepool}} {{reason}}")]),
        panel("Nodes being replaced, drains past their deadline", [("max(nodesmith_nodes_replacing)", "replacing"),
                                                                  ("max(nodesmith_drains_past_deadline)", "past deadline")]),
        panel("Consolidations after validation (per hour)", [
            ("sum by (result) (rate(nodesmith_consolidation_validations_total[$__rate_interval])) * 3600", "{{result}}")]),
        panel("Disruptions decided (per hour)", [("sum(rate(nodesmith_disruptions_total[$__rate_interval])) * 3600", "nodes")]),
    ]),
    "nodesmith-agents": ("nodesmith / agent fleet", [
        panel("Nodes reporting", [("max(nodesmith_nodes)", "nodes")], kind="stat"),
        panel("Oldest report", [("max(nodesmith_node_report_age_seconds)", "age")], unit="s", kind="stat"),
        panel("Report age, ten oldest", [("topk(10, nodesmith_node_report_age_seconds)", "{{instance_id}}")], unit="s"),
        panel("Reports by result (per second)", [("sum by (result) (rate(nodesmith_reports_total[$__rate_interval]))", "{{result}}")]),
        panel("Notices in force by kind", [("sum by (kind) (nodesmith_notices_in_force)", "{{kind}}")], stack=True),
        panel("Notices by kind (per hour)", [("sum by (kind) (rate(nodesmith_notices_total[$__rate_interval])) * 3600", "{{kind}}")]),
        panel("Drains: by agents, and by the coordinator for silent agents", [
            ("sum(nodesmith_nodes_draining)", "nodes draining"),
            ("max(nodesmith_proxy_drains_active)", "coordinator drains"),
            ("max(nodesmith_drains_past_deadline)", "past deadline")]),
        panel("Pods evicted by the coordinator's drains (per hour)", [
            ("sum(rate(nodesmith_proxy_drain_pods_evicted_total[$__rate_interval])) * 3600", "evicted")]),
    ]),
    "nodesmith-coordinator": ("nodesmith / coordinator", [
        panel("Leader", [("max(nodesmith_leader)", "leading")], kind="stat"),
        panel("Lease transitions", [("max(nodesmith_leader_lease_transitions)", "transitions")]),
        panel("Provisioning round", quantiles("nodesmith_provisioning_round_duration_seconds", "round"), unit="s"),
        panel("Solver", quantiles("nodesmith_solver_duration_seconds", "solver") +
              [("max(nodesmith_disruption_pass_seconds)", "last disruption pass")], unit="s"),
        panel("EC2 requests, throttling and errors (per second)", [
            ("sum(rate(nodesmith_ec2_requests_total[$__rate_interval]))", "requests"),
            ("sum(rate(nodesmith_ec2_throttled_total[$__rate_interval]))", "throttled"),
            ("sum(rate(nodesmith_ec2_errors_total[$__rate_interval]))", "errors")]),
        panel("Kubernetes API watch errors by resource (per minute)", [
            ("sum by (resource) (rate(nodesmith_kube_watch_errors_total[$__rate_interval])) * 60", "{{resource}}")]),
        panel("Agent link messages (per second)", [("sum(rate(nodesmith_link_messages_total[$__rate_interval]))", "messages"),
                                                   ("sum(rate(nodesmith_link_replies_dropped_total[$__rate_interval]))", "replies dropped")]),
        panel("Interruption queue errors (per minute)", [
            ("sum by (operation) (rate(nodesmith_interruption_errors_total[$__rate_interval])) * 60", "{{operation}}")]),
        # process_* comes from every process Prometheus scrapes: the join keeps the coordinators'
        panel("Coordinator resident memory (grows with the agents connected: docs/helm.md)", [
            ("process_resident_memory_bytes and on (job, instance) nodesmith_build_info", "{{instance}}")], unit="bytes"),
        panel("Coordinator file descriptors (one per agent connected)", [
            ("process_open_fds and on (job, instance) nodesmith_build_info", "{{instance}} open"),
            ("process_max_fds and on (job, instance) nodesmith_build_info", "{{instance}} limit")]),
    ]),
}


def dashboard(uid, title, panels):
    for i, p in enumerate(panels):
        p["id"] = i + 1
        w = 6 if p["type"] in ("stat", "gauge") else 12
        p["gridPos"] = {"h": 4 if w == 6 else 8, "w": w, "x": 0, "y": 0}
    # lay out: stats four to a row, graphs two to a row
    x = y = row_h = 0
    for p in panels:
        g = p["gridPos"]
        if x + g["w"] > 24:
            x, y, row_h = 0, y + row_h, 0
        g["x"], g["y"] = x, y
        x += g["w"]
        row_h = max(row_h, g["h"])
    return {"uid": uid, "title": title, "tags": ["nodesmith"], "timezone": "utc", "schemaVersion": 39,
            "editable": True, "refresh": "30s", "time": {"from": "now-6h", "to": "now"},
            "templating": {"list": variables()}, "panels": panels,
            "annotations": {"list": []}, "links": [{"title": "nodesmith", "type": "dashboards", "tags": ["nodesmith"],
                                                    "asDropdown": True}]}


def render():
    return {f"{uid}.json": json.dumps(dashboard(uid, t, p), indent=2) + "\n" for uid, (t, p) in DASHBOARDS.items()}


if __name__ == "__main__":
    for name, text in render().items():
        with open(os.path.join(HERE, name), "w") as f:
            f.write(text)
        print(name)
