"""A fake Kubernetes API server for nodesmith's tests and local demo.

Entry point: tests/fakes/kubeapi.py (python3 tests/fakes/kubeapi.py --port 0). The modules:

- util: Status errors, field errors, time, quantities, names.
- selectors: label and field selectors.
- patch: JSON merge patch, strategic merge patch, JSON patch.
- resources: the built-in resource types (defaults, validation, tables, field selectors).
- crd: custom resources from CustomResourceDefinitions (schema validation, pruning, defaults).
- store: objects, resourceVersion, event history, snapshots.
- api: the verbs (create, get, list, update, patch, delete, watch, eviction, binding).
- controllers: scheduler, kubelet, node lifecycle, ReplicaSet, Deployment, DaemonSet,
  disruption (PDB status), garbage collector, namespaces, CRDs, pod GC, taint eviction.
- server: HTTP/1.1 front end, discovery, tables, watch streaming.
- control: the /_fake/ endpoints and failure injection.
"""
