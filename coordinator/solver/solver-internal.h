/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* Private to coordinator/solver: compiled snapshot and placement state. */

#include "solver.h"

#define R_MAX _SOLVER_RES_MAX
#define NCT _SOLVER_CAPACITY_MAX
#define NO_ZONE (-1)
#define NONE32 UINT32_MAX

/* ---- arena extras, interning ---------------------------------------------------------------- */

void *solver_arena_alloc_nozero(SolverArena *a, size_t size);

typedef struct Intern {
        SolverArena *arena;
        uint32_t *slots;
        size_t cap;
        const char **strs;
        size_t n, strs_cap;
} Intern;

void solver_intern_init(Intern *t, SolverArena *arena);
void solver_intern_done(Intern *t);
int solver_intern_get(Intern *t, const char *s, uint32_t *ret);
int64_t solver_intern_lookup(const Intern *t, const char *s);

/* ---- bitsets over instance types ------------------------------------------------------------ */

static inline void bs_copy(uint64_t *d, const uint64_t *s, size_t w) {
        memcpy(d, s, w * sizeof(uint64_t));
}
static inline void bs_fill(uint64_t *d, size_t w, size_t nbits) {
        for (size_t i = 0; i < w; i++)
                d[i] = ~(uint64_t) 0;
        if (nbits % 64)
                d[w - 1] = (((uint64_t) 1) << (nbits % 64)) - 1;
        else if (w > 0 && nbits == 0)
                d[0] = 0;
}
static inline void bs_and(uint64_t *d, const uint64_t *s, size_t w) {
        for (size_t i = 0; i < w; i++)
                d[i] &= s[i];
}
static inline bool bs_and_any(uint64_t *d, const uint64_t *a, const uint64_t *b, size_t w) {
        uint64_t acc = 0;
        for (size_t i = 0; i < w; i++)
                acc |= (d[i] = a[i] & b[i]);
        return acc != 0;
}
static inline bool bs_any(const uint64_t *s, size_t w) {
        for (size_t i = 0; i < w; i++)
                if (s[i])
                        return true;
        return false;
}
static inline bool bs_eq(const uint64_t *a, const uint64_t *b, size_t w) {
        return memcmp(a, b, w * sizeof(uint64_t)) == 0;
}
static inline void bs_set(uint64_t *d, size_t i) {
        d[i / 64] |= ((uint64_t) 1) << (i % 64);
}
static inline bool bs_test(const uint64_t *d, size_t i) {
        return (d[i / 64] >> (i % 64)) & 1;
}
static inline size_t bs_count(const uint64_t *s, size_t w) {
        size_t n = 0;
        for (size_t i = 0; i < w; i++)
                n += (size_t) __builtin_popcountll(s[i]);
        return n;
}
#define BS_FOREACH(i, s, w)                                                                   \
        for (size_t _w_ = 0; _w_ < (w); _w_++)                                                \
                for (uint64_t _b_ = (s)[_w_]; _b_; _b_ &= _b_ - 1)                            \
                        for (size_t i = _w_ * 64 + (size_t) __builtin_ctzll(_b_), _o_ = 1; _o_; \
                             _o_ = 0)

/* Offering slots: bit = capacity_type * 32 + zone. */
static inline uint64_t slots_of_zone(int z) {
        return (((uint64_t) 1) << z) | (((uint64_t) 1) << (32 + z));
}
static inline uint32_t zones_of_slots(uint64_t slots) {
        return (uint32_t) (slots & 0xffffffffu) | (uint32_t) (slots >> 32);
}
static inline uint64_t slots_of_zones(uint32_t zm) {
        return (uint64_t) zm | ((uint64_t) zm << 32);
}
static inline uint64_t slots_of_ct(int ct) {
        return (uint64_t) 0xffffffffu << (32 * ct);
}

/* ---- compiled node requirements (custom label keys) ----------------------------------------- */

/* The set of values a label may take: values (sorted ids) or their complement, bounded by
 * gt/lt for integer values. absent: the label must not exist. */
typedef struct VSet {
        uint32_t key;
        bool absent;
        bool complement;
        bool has_gt, has_lt;
        int64_t gt, lt;
        uint32_t n;
        uint32_t *vals;
} VSet;

typedef struct VSetList {
        uint32_t n;
        VSet *sets; /* sorted by key */
} VSetList;

/* ---- topology ------------------------------------------------------------------------------- */

typedef enum TopoKey {
        TOPO_ZONE,
        TOPO_HOST,
        TOPO_CT,                            /* capacity type: domains SolverCapacityType */
        TOPO_OTHER,
} TopoKey;

typedef struct Group {
        TopoKey key;
        const SolverLabelSelector *selector;
        const char *const *namespaces;      /* NULL with all_namespaces */
        size_t n_namespaces;
        bool all_namespaces;
        const char *description;            /* for messages */
        bool has_anti_owners;               /* some pod carries a required anti term on it */
        int64_t total;                      /* matching pods anywhere */
        int32_t *zcount, *zowners;          /* [n_zones]; TOPO_CT: [capacity type] */
        int32_t *hcount, *howners;          /* [node capacity] */
} Group;

typedef enum ConstraintKind {
        CON_SPREAD,
        CON_AFFINITY,
        CON_ANTI,
} ConstraintKind;

typedef struct Constraint {
        ConstraintKind kind;
        bool required;
        uint32_t group;
        int32_t max_skew;
        int32_t min_domains;
        bool self;                          /* the owning pod matches the group */
        int32_t host_min;                   /* hostname spread: the smallest count over the
                                             * eligible nodes (refreshed for every batch) */
} Constraint;

/* ---- shapes and variants -------------------------------------------------------------------- */

typedef enum RelaxKind {
        RELAX_REQUIRED_TERM,
        RELAX_PREF_AFFINITY,
        RELAX_PREF_ANTI,
        RELAX_PREF_NODE,
        RELAX_SCHEDULE_ANYWAY,
        RELAX_PREFER_NO_SCHEDULE,
} RelaxKind;

typedef struct PoolCompat PoolCompat;

/* A shape with some preferences relaxed: what placement actually checks. */
typedef struct Variant {
        uint32_t shape;
        uint32_t level;
        bool unsupported;
        const char *unsupported_msg;
        /* Requirements as a list (for existing nodes, matched on labels). */
        const SolverRequirement **reqs;
        uint32_t n_reqs;
        uint64_t *types;                    /* instance types allowed by type-derived keys */
        uint64_t slots;                     /* zone x capacity-type allowed */
        uint64_t slots_novol;               /* the same without the volume's zones */
        bool volume_restricted;             /* slots narrowed by volume zones */
        bool new_nodes_ok;                  /* false with kubernetes.io/hostname In [...] */
        VSetList custom;                    /* requirements on custom keys */
        const SolverRequirement **pool_reqs; /* on nodesmith.io/nodepool */
        uint32_t n_pool_reqs;
        bool tolerate_prefer_no_schedule;
        Constraint *cons;                   /* owned topology constraints in force */
        uint32_t n_cons;
        bool zone_mode;                     /* placement must fix a zone */
        uint32_t eligible_zones;            /* zone domains for spread */
        bool ct_mode;                       /* placement must fix a capacity type */
        uint32_t eligible_cts;              /* capacity-type domains for spread */
        PoolCompat *pools;                  /* [n_nodepools], lazily */
        uint8_t *node_ok;                   /* [n_existing]: 0 unknown, 1 ok, 2 not */
        const char *req_desc;               /* requirements for messages */
} Variant;

struct PoolCompat {
        bool done, ok;
        SolverReason reason;
        const char *message;
        uint64_t *types;                    /* can hold one pod plus DaemonSet overhead */
        uint64_t slots;
        const VSetList *custom;             /* narrowed custom set for new nodes */
        bool custom_changed;
};

typedef struct Shape {
        const SolverPod *pod;               /* representative */
        uint32_t *pods;                     /* pending pods of this shape */
        uint32_t n_pods, cap_pods;
        SolverResources req;
        uint8_t active[R_MAX];              /* resources with a non-zero request */
        uint8_t n_active;
        uint32_t *matches;                  /* groups whose selector matches */
        uint32_t n_matches;
        uint32_t n_relax;
        RelaxKind *relax;                   /* relaxation steps in Karpenter's order */
        Variant **variants;                 /* [n_relax + 1] */
        uint32_t *spread_g, *aff_g, *anti_g, *paff_g, *panti_g; /* group per term */
        uint32_t *paff_order, *panti_order, *pnode_order;       /* heaviest first */
        bool headroom;                      /* virtual headroom unit */
        bool has_constraints;
        bool has_wffc;
        int64_t size_key[2];                /* dominant share, then sum: sort order */
        bool anchor;                        /* at most a few per node: seeds nodes, goes first */
} Shape;

/* ---- catalog, pools, nodes ------------------------------------------------------------------ */

typedef struct FitTable {
        const SolverResources *alloc_of;    /* identity: the allocatable array it was built from */
        size_t stride;                      /* bytes between consecutive types' allocatable */
        /* per resource: sorted distinct allocatable values and the bitset of types >= each */
        uint32_t nvals[R_MAX];
        int64_t *vals[R_MAX];
        uint64_t *ge[R_MAX];                /* nvals * W words */
        int64_t *alloc;                     /* [T * R_MAX] */
} FitTable;

typedef struct Pool {
        const SolverNodePool *np;
        uint32_t index;
        uint64_t *types;                    /* type-key requirements */
        uint64_t slots;
        VSetList custom;                    /* labels + custom-key requirements */
        FitTable *fit;
        SolverResources ds;                 /* DaemonSet overhead on a new node */
        SolverHostPort *ds_ports;           /* host ports the DaemonSets take on a new node */
        uint32_t n_ds_ports;
        bool has_limits;
        SolverResources remaining;          /* limits - existing capacity (base) */
        int64_t nodes_left;                 /* node limit - existing nodes (INT64_MAX: none) */
        int64_t nodes_left_run;             /* the same during a run, new nodes taken off */
        bool has_min_values;
        uint32_t *price_order;              /* types by cheapest offering in the pool's slots */
        double *tprice;                     /* [T]: that cheapest offering, < 0 when none */
        double *odprice;                    /* [T]: the cheapest on-demand one, < 0 when none */
        uint32_t n_price_order;
        const SolverRequirement **minv;     /* requirements with min_values on type keys */
        uint32_t n_minv;
        uint32_t *minv_key;
} Pool;

typedef enum NodeKind {
        NODE_EXISTING,
        NODE_NEW,
} NodeKind;

typedef struct Node {
        NodeKind kind;
        bool removed;
        bool closed;                        /* existing: cordoned/deleting */
        int32_t zone;
        uint32_t pool;                      /* NONE32: unmanaged */
        /* room left in the cheapest type that fits: beside the fields above, in the first cache
         * line, as every batch of a zonal shape reads them for every node (zones.c) */
        int64_t slack[R_MAX];
        uint64_t slots;                     /* new nodes */
        uint64_t *types;                    /* new nodes: W words */
        uint64_t *budget;                   /* new nodes: types within its budget (price.c) */
        uint64_t *base;                     /* new nodes: types its pods allow, before their weight */
        bool has_budget;
        const VSetList *custom;             /* new nodes */
        int64_t used[R_MAX];
        int64_t cap[R_MAX];                 /* existing: allocatable; new: max over types */
        int64_t reserved[R_MAX];            /* new nodes under limits: capacity held */
        SolverHostPort *ports;
        uint32_t n_ports, cap_ports;
        uint32_t n_pods;
        uint32_t headroom;
        bool is_static;                     /* new: kept for a static NodePool (static.c) */
        int32_t min_priority;               /* existing: lowest bound pod priority */
        uint32_t first_bound, n_bound;      /* existing: range in Solver.bound */
} Node;

/* price.c: the cpu and memory still to place of the shapes counted in one pool and class under
 * one best-value type, by mix bucket: half steps of their memory:cpu ratio */
#define MIX_BUCKETS 32

typedef struct DemandSum {
        uint32_t type, next;
        int64_t by[MIX_BUCKETS][2];
} DemandSum;

typedef struct Batch {
        uint32_t shape;
        uint32_t level;
        uint32_t *pods;
        uint32_t n;
        int32_t priority;
        uint64_t seq;
} Batch;

/* Undo log entries: what a run changed in the base state, by index (arrays may move). */
typedef enum UndoKind {
        U_USED,          /* node a, resource b */
        U_NPODS,         /* node a */
        U_REMOVED,       /* node a */
        U_NPORTS,        /* node a */
        U_TOTAL,         /* group a */
        U_ZCOUNT,        /* group a, zone b */
        U_ZOWNERS,
        U_HCOUNT,        /* group a, node b */
        U_HOWNERS,
        U_PREEMPTED,     /* pod a */
} UndoKind;

typedef struct Undo {
        uint8_t kind;
        uint32_t a, b;
        int64_t v;
} Undo;

struct Solver {
        const SolverSnapshot *snap;
        SolverArena *arena;
        Intern keys, vals;
        uint32_t T, W;
        /* well-known key ids */
        uint32_t k_zone, k_ct, k_host, k_pool, k_type;
        /* instance types */
        bool *type_key;                     /* [n keys]: defined by some instance type */
        uint32_t *type_vals;                /* [n keys at compile][T]: value id or NONE32 */
        uint32_t n_type_keys_cap;
        uint64_t *all_types;
        uint64_t *offer_bits;               /* [64][W]: types with an available offering */
        double *price;                      /* [T][64]: price or < 0 */
        uint64_t *type_slots;               /* [T] */
        FitTable **fits;
        uint32_t n_fits;
        /* zones */
        uint32_t n_zones;
        const char *zones[SOLVER_MAX_ZONES];
        uint32_t zone_ids[SOLVER_MAX_ZONES]; /* value ids */
        /* pools, sorted by weight */
        Pool *pools;
        uint32_t n_pools;
        uint32_t *pool_order;
        bool any_prefer_no_schedule;
        double mem_weight;                  /* millicores per byte across the catalog */
        /* pods: snapshot pods then virtual headroom pods */
        const SolverPod *pods;              /* == snap->pods when no headroom */
        SolverPod *vpods;                   /* virtual headroom pods */
        uint32_t n_pods_all;
        uint32_t *pod_shape;                /* [n_pods_all] */
        int32_t *pod_node;                  /* [n_snapshot pods]: existing node or -1 */
        uint32_t *bound;                    /* pods bound to existing nodes, grouped by node */
        uint32_t n_bound;
        Shape *shapes;
        uint32_t n_shapes;
        Group *groups;
        uint32_t n_groups;
        /* nodes: existing first */
        Node *nodes;
        uint32_t n_existing, n_nodes, cap_nodes;
        uint64_t *node_types;               /* pool of 3 x W-word bitsets for new nodes */
        size_t node_types_cap;              /* in nodes */
        /* run state */
        const SolverOptions *opts;
        Undo *undo;
        size_t n_undo, cap_undo;
        uint8_t *preempted;                 /* [n_snapshot pods] */
        uint8_t *claim_zone_set;
        Batch *heap;
        size_t n_heap, cap_heap;
        Batch *retry;                       /* failed on topology: tried again after the rest */
        size_t n_retry, cap_retry;
        int ct_pin;                         /* capacity type the pods being placed must use; -1 */
        bool retrying;                      /* placing the pods that failed on topology */
        bool retry_final;                   /* the last round: failures are decided */
        uint64_t n_placed;                  /* pods placed so far (progress of the rounds) */
        uint64_t seq;
        size_t new_nodes;
        size_t headroom_unplaced;           /* headroom units that failed in this run */
        uint64_t deadline_usec;             /* CLOCK_MONOTONIC; 0: options set no budget */
        unsigned budget_polls;              /* calls since the clock was last read */
        bool out_of_time;                   /* the budget ran out: place nothing more */
        bool budget_progress;               /* something was placed: the budget may end the run */
        size_t n_deferred;                  /* pods left undecided because of it */
        SolverResources *remaining;         /* [n_pools] limits left during a run */
        /* run output (into the result) */
        SolverDecision *decisions;
        uint32_t *launch_of_node;
        /* WFFC claims */
        Intern claims;
        int32_t *claim_zone;                /* [claims] */
        size_t claim_cap;
        /* failure diagnostics of the batch being placed */
        SolverReason fail_reason;
        const char *fail_msg;
        /* scratch */
        uint64_t *scratch;                  /* several W-word bitsets */
        struct ZoneLists *zone_lists;       /* zones.c: a batch's candidate nodes per zone */
        uint32_t *stamp;
        uint32_t stamp_gen;
        size_t stamp_cap;
        /* results arena for the current run */
        SolverArena *rarena;
        uint32_t *preempt_list;
        size_t n_preempt, cap_preempt;
        /* price.c: per pool and class (spot allowed, on-demand only), the unit prices of cpu and
         * memory (LP duals over the pool's types for the run's demand) and the demand still to
         * place */
        double *unit_price;                 /* [n_pools][2][2] */
        double *to_place;                   /* [n_pools][2][2] */
        int64_t *forced;                    /* [n_pools][2]: new nodes hostname rules still force */
        int64_t *shape_left;                /* [n_shapes]: pods still to place */
        uint8_t *shape_bucket;              /* [n_shapes]: its mix bucket (its requests' ratio) */
        DemandSum *demand;                  /* pods left per pool, class and best type (price.c) */
        size_t n_demand, cap_demand;
        uint32_t *demand_at;                /* [n_pools][2][T]: index in demand, NONE32 */
        uint32_t *demand_head;              /* [n_pools][2]: first of its list in demand */
        Variant **shape_var;                /* [n_shapes]: the variant they were counted with */
        uint32_t *shape_best;               /* [n_shapes][n_pools]: best-value type, NONE32 */
        double *type_value;                 /* [T]: a node's types valued at the unit prices */
};

static inline const SolverPod *pod_at(const Solver *s, uint32_t i) {
        return i < s->snap->n_pods ? &s->snap->pods[i] : &s->vpods[i - s->snap->n_pods];
}

/* The capacity type of existing node ni (a domain of TOPO_CT). */
static inline int snap_ct(const Solver *s, uint32_t ni) {
        return s->snap->nodes[ni].capacity_type == SOLVER_CAPACITY_SPOT ? SOLVER_CAPACITY_SPOT : SOLVER_CAPACITY_ON_DEMAND;
}

/* labels.c */
bool solver_req_value_matches(const SolverRequirement *r, const char *v);
bool solver_vset_contains(const VSet *s, uint32_t val, const char *str);
int solver_vset_from_requirement(Solver *s, const SolverRequirement *r, uint32_t key, VSet *ret);
/* Intersects a node's custom sets with a pod's. Returns 1 and *ret (NULL: unchanged) when
 * compatible, 0 when not (with a message), <0 on OOM. */
int solver_vsetlist_narrow(Solver *s, SolverArena *arena, const VSetList *node, const VSetList *pod,
                    const VSetList **ret, const char **ret_msg);
int solver_vsetlist_add(Solver *s, VSetList *l, const VSet *v);
bool solver_int_of(const char *s, int64_t *ret);

/* variant.c */
Variant *solver_variant(Solver *s, uint32_t shape, uint32_t level);
PoolCompat *solver_pool_compat(Solver *s, Variant *v, uint32_t pool);
bool solver_existing_ok(Solver *s, Variant *v, uint32_t node);
/* prepare.c */
bool solver_pool_min_values_ok(Solver *s, const Pool *p, const uint64_t *types);
void solver_fit_set(const Solver *s, const FitTable *f, const int64_t *demand, uint64_t *out);
uint64_t *solver_offer_set(const Solver *s, uint64_t slots, uint64_t *out);
/* existing.c */
int solver_grow_nodes(Solver *s, size_t need);
int solver_port_add(Node *n, const SolverHostPort *p); /* a host port the node now holds */
/* static.c: the empty nodes static NodePools lack, opened after the pending pods are placed. */
int solver_static_open(Solver *s);
const char *solver_format_resources(SolverArena *a, const int64_t *v);

/* prepare.c: compiled requirements and helpers the other compile stages share */
typedef struct CReqs {
        uint64_t *types;
        uint64_t slots;
        bool new_nodes_ok;
        bool custom_empty;
        VSetList custom;
        const SolverRequirement **pool_reqs;
        uint32_t n_pool_reqs;
        const SolverRequirement *empty_by; /* requirement that emptied types or slots */
} CReqs;

int solver_compile_reqs(Solver *s, const SolverRequirement *const *reqs, size_t n, CReqs *c);
const char *solver_describe_req(SolverArena *a, const SolverRequirement *r);
int solver_pool_reqs_ok(const Solver *s, const SolverRequirement *const *reqs, uint32_t n, const char *pool);
int solver_zone_index(Solver *s, const char *zone, bool add);
const char *solver_node_zone_name(const SolverNode *n);

/* The compile stages solver_new() runs after the catalog and the pools: shapes.c, existing.c */
int solver_compile_shapes(Solver *s);
int solver_compile_nodes(Solver *s, Intern *names);
int solver_account_bound(Solver *s);
int solver_ds_overhead(Solver *s);
int solver_make_headroom(Solver *s);

/* place.c */
int solver_place_all(Solver *s);
void solver_undo_all(Solver *s);

/* Placement internals shared by place.c, undo.c, room.c, open.c, preempt.c and zones.c */
int solver_undo_push(Solver *s, UndoKind k, uint32_t a, uint32_t b, int64_t v);
int solver_set_used(Solver *s, uint32_t ni, int r, int64_t v);
int solver_set_npods(Solver *s, uint32_t ni, uint32_t v);
int solver_account(Solver *s, const Shape *sh, const Variant *v, uint32_t ni, int64_t d, bool bound_anti);
int solver_heap_push(Solver *s, const Batch *b);
void solver_zero_host_min(Variant *v);
int64_t solver_host_cap(const Solver *s, const Variant *v, uint32_t ni);
bool solver_ports_conflict(const Node *n, const SolverPod *p);
void solver_node_recompute_cap(Solver *s, Node *n);
void solver_node_update_slack(Solver *s, Node *n);
void solver_limits_reserve(Solver *s, Node *n, bool release_only);
void solver_fail(Solver *s, SolverReason r, const char *msg);
int solver_open_node(Solver *s, Variant *v, int z, uint32_t *ret);
void solver_fresh_node_failed(Solver *s, const Variant *v, uint32_t ni);
void solver_discard_last_node(Solver *s, uint32_t ni);
int solver_try_preempt(Solver *s, Variant *v, uint32_t pod, uint32_t zmask);
int solver_requeue(Solver *s, const uint32_t *pods, size_t n);
uint32_t solver_allowed_domains(Solver *s, const Variant *v, TopoKey key, uint32_t n_dom, uint32_t E,
                                int64_t *quota);
int64_t solver_place_zone(Solver *s, Variant *v, const uint32_t *pods, int64_t n);
void solver_zone_lists_free(Solver *s);
int64_t solver_place_plain(Solver *s, Variant *v, const uint32_t *pods, int64_t n);

/* price.c: what a new node may cost */
/* At most this many pods of the variant fit one node by its hostname rules or host ports (0:
 * no such limit); *ret_relaxed: it has rules the per-node count does not capture. */
uint32_t solver_variant_max_per_node(const Solver *s, const Variant *v, bool *ret_relaxed);
int solver_budget_prepare(Solver *s);
void solver_budget_consume(Solver *s, Variant *v, int64_t m);
/* The types within the budget of a node opened in the pool with these types; false: no budget. */
bool solver_budget_apply(Solver *s, uint32_t pool, const Variant *seed, uint64_t slots, const uint64_t *types,
                    uint64_t *ret_budget);
void solver_budget_done(Solver *s);

/* room.c and zones.c, for repair.c */
int64_t solver_place_fit_count(Solver *s, Variant *v, uint32_t ni, int64_t want, int z);
int solver_place_commit(Solver *s, Variant *v, uint32_t ni, const uint32_t *pods, int64_t m, int z);
/* Takes one pod of the variant off planned node ni (the node may become smaller types again). */
int solver_place_uncommit(Solver *s, Variant *v, uint32_t ni);
int64_t solver_place_free_room(const Solver *s, const Shape *sh, const Node *n);
uint32_t solver_place_cheapest_type(const Solver *s, const Node *n);

/* open.c, for improve.c: a fresh planned node beside planned node a (same pool, zone and
 * offerings, no price budget), and dropping the last planned node while it is empty. */
int solver_place_open_beside(Solver *s, uint32_t a, uint32_t *ret);
void solver_place_discard_node(Solver *s, uint32_t ni);
/* Whether planned node ni keeps to its price budget (off: it may grow into any type it may be). */
void solver_place_use_budget(Solver *s, uint32_t ni, bool on);

/* repair.c */
int solver_repair(Solver *s);
/* The planned pods by node at the time it was built (pods moved since keep their old slot:
 * check decisions[pi].target), and moves between planned nodes. */
typedef struct PodOn {
        uint32_t *start;  /* [n_nodes + 1] */
        uint32_t *pods;
        uint32_t n_nodes; /* nodes when built */
        size_t work;      /* receiving nodes examined so far */
} PodOn;
int solver_pod_on_build(Solver *s, PodOn *on);
void solver_pod_on_done(PodOn *on);
/* A pod planned on a new node that may move (no host ports, WaitForFirstConsumer claims, headroom). */
bool solver_pod_movable(const Solver *s, uint32_t pi);
/* What the node pays for type t: on-demand when it may not use spot; 0 for NONE32. */
double solver_node_type_price(const Solver *s, const Node *n, uint32_t t);
/* The variant pod pi was placed with and the zone it must keep moving off node a (NO_ZONE: any):
 * 1, or 0 when a zonal pod's node has no zone yet (it may not move). */
int solver_pod_variant_on(Solver *s, uint32_t pi, uint32_t a, Variant **ret_v, int *ret_z);
/* Moves pod pi back from node from to node to (where it was: it fits). */
int solver_repair_move_back(Solver *s, uint32_t pi, uint32_t from, uint32_t to);

/* improve.c */
int solver_improve(Solver *s);

/* result.c */
int solver_build_result(Solver *s, SolverResult **ret);

/* The time budget (SolverOptions.time_budget_usec): true once it is spent. Reads the clock
 * on the first call and every 16th after, so it can sit in inner loops. */
bool solver_out_of_time(Solver *s);
void solver_budget_start(Solver *s, uint64_t budget_usec);
