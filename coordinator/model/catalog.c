/* SPDX-License-Identifier: Apache-2.0 */
/* The instance catalog: types, offerings, prices and allocatable, from a file or EC2. */

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>

#include "catalog.h"
#include "fileio.h"
#include "grow.h"
#include "log.h"
#include "macro.h"

#define MI ((int64_t) 1024 * 1024)
#define CATALOG_MAX_FILE (64u * 1024 * 1024)
#define CATALOG_MAX_TYPES 10000u /* EC2 offers about 1 000 */

typedef struct TypeInfo {
        uint32_t enis, ipv4_per_eni;
        SolverResources nominal;      /* before VM overhead and reservations */
        bool learned;
        int64_t learned_mem_capacity; /* what the kubelet saw */
        int64_t local_nvme_bytes;     /* instance store (0: none) */
        bool metal_trunk;             /* bare metal, not burstable: trunking with a Nitro sibling */
} TypeInfo;

typedef struct PoolAlloc {
        SolverKubelet kubelet;
        int64_t root;
        SolverResources *alloc;
        uint64_t generation;
} PoolAlloc;

struct Catalog {
        SolverArena *arena;
        char *region;
        SolverInstanceType *types;
        TypeInfo *info;
        size_t n, cap;
        uint64_t generation; /* bumped by every change: cached allocatable arrays go stale */
        PoolAlloc *pa;
        size_t n_pa;
};

int catalog_new(const char *region, Catalog **ret) {
        Catalog *c = calloc(1, sizeof(Catalog));
        if (!c)
                return -ENOMEM;
        int r = solver_arena_new(&c->arena);
        if (r < 0) {
                free(c);
                return r;
        }
        c->region = strdup(region ? region : "");
        if (!c->region) {
                catalog_free(c);
                return -ENOMEM;
        }
        *ret = c;
        return 0;
}

Catalog *catalog_free(Catalog *c) {
        if (!c)
                return NULL;
        for (size_t i = 0; i < c->n_pa; i++)
                free(c->pa[i].alloc);
        free(c->pa);
        free(c->types);
        free(c->info);
        free(c->region);
        solver_arena_free(c->arena);
        free(c);
        return NULL;
}

const char *catalog_region(const Catalog *c) {
        return c->region;
}

const SolverInstanceType *catalog_types(const Catalog *c, size_t *ret_n) {
        *ret_n = c->n;
        return c->types;
}

int catalog_find(const Catalog *c, const char *name) {
        if (!name)
                return -ENOENT;
        for (size_t i = 0; i < c->n; i++)
                if (streq(c->types[i].name, name))
                        return (int) i;
        return -ENOENT;
}

double catalog_on_demand_price(const Catalog *c, const char *name) {
        int i = catalog_find(c, name);
        if (i < 0)
                return -1;
        double best = -1;
        const SolverInstanceType *t = &c->types[i];
        for (size_t o = 0; o < t->n_offerings; o++)
                if (t->offerings[o].capacity_type == SOLVER_CAPACITY_ON_DEMAND && t->offerings[o].available &&
                    (best < 0 || t->offerings[o].price < best))
                        best = t->offerings[o].price;
        return best;
}

static int set_error(char **ret_error, const char *fmt, ...) _printf_(2, 3);
static int set_error(char **ret_error, const char *fmt, ...) {
        if (ret_error) {
                va_list ap;
                va_start(ap, fmt);
                if (vasprintf(ret_error, fmt, ap) < 0)
                        *ret_error = NULL;
                va_end(ap);
        }
        return -EINVAL;
}

/* "c6a" -> category "c", generation "6"; "x2iedn" -> "x", "2"; "u-6tb1" -> "u", "" */
static void split_family(const char *family, char *cat, size_t ncat, char *gen, size_t ngen) {
        size_t i = 0;
        while (family[i] && isalpha((unsigned char) family[i]) && i + 1 < ncat) {
                cat[i] = family[i];
                i++;
        }
        cat[i] = 0;
        size_t j = 0;
        while (family[i] && isdigit((unsigned char) family[i]) && j + 1 < ngen)
                gen[j++] = family[i++];
        gen[j] = 0;
}

static const char *json_str(const cJSON *o, const char *k) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
        return cJSON_IsString(v) ? v->valuestring : NULL;
}

static bool json_num(const cJSON *o, const char *k, double *ret) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
        if (!cJSON_IsNumber(v))
                return false;
        *ret = v->valuedouble;
        return true;
}

static int add_label(SolverArena *a, SolverLabel *l, size_t *n, const char *k, const char *fmt, ...) _printf_(5, 6);
static int add_label(SolverArena *a, SolverLabel *l, size_t *n, const char *k, const char *fmt, ...) {
        char buf[128];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(buf, sizeof(buf), fmt, ap);
        va_end(ap);
        l[*n].key = k;
        l[*n].value = solver_arena_strdup(a, buf);
        if (!l[*n].value)
                return -ENOMEM;
        (*n)++;
        return 0;
}

static void compute_allocatable(const TypeInfo *ti, const SolverKubelet *k, int64_t root, SolverResources *cap,
                                SolverResources *alloc) {
        *cap = ti->nominal;
        cap->v[SOLVER_RES_EPHEMERAL] = root > 0 ? root : CATALOG_DEFAULT_ROOT_VOLUME;
        if (k && k->instance_store_raid0 && ti->local_nvme_bytes > 0)
                cap->v[SOLVER_RES_EPHEMERAL] = ti->local_nvme_bytes;
        double vm = CATALOG_VM_OVERHEAD_PERCENT;
        if (ti->learned && ti->learned_mem_capacity > 0) {
                /* the hypervisor's share, as observed: no guess left */
                cap->v[SOLVER_RES_MEMORY] = ti->learned_mem_capacity;
                vm = 0;
        }
        (void) solver_kubelet_allocatable(cap, ti->enis, ti->ipv4_per_eni, k, vm, alloc);
}

/* Branch limits agreed for the types whose limit is not their size's (the VPC resource
 * controller's StandaloneBranchLimits.cfg). */
static const struct {
        const char *type;
        int16_t total;
} branch_exceptions[] = {
        { "a1.medium", 12 },     { "d3.xlarge", 42 },     { "d3.2xlarge", 62 },   { "d3.8xlarge", 122 },
        { "d3en.xlarge", 32 },   { "d3en.6xlarge", 122 }, { "d3en.8xlarge", 122 }, { "d3en.12xlarge", 122 },
        { "g4dn.xlarge", 42 },   { "i3en.large", 8 },     { "i3en.xlarge", 16 },  { "i3en.2xlarge", 32 },
        { "i3en.3xlarge", 42 },  { "inf1.xlarge", 42 },   { "r5b.large", 8 },     { "r5b.xlarge", 16 },
        { "r5b.2xlarge", 32 },   { "z1d.large", 16 },     { "z1d.xlarge", 32 },   { "z1d.2xlarge", 62 },
};

/* Branch network interfaces (the vpc.amazonaws.com/pod-eni resource of EKS's security groups for
 * pods) of a trunking-compatible type, as the VPC resource controller derives them from
 * DescribeInstanceTypes: the branch limit agreed for the type's size (medium 6, large 12, xlarge
 * 22, 2xlarge 42, up to 12xlarge 62, then 122), less the type's MaximumNetworkInterfaces. */
static int64_t pod_eni_branches(const char *name, const char *size, uint32_t enis) {
        int64_t total = 0;
        unsigned n = 1;
        char rest[16];
        if (!size)
                return 0;
        if (streq(size, "medium"))
                total = 6;
        else if (streq(size, "large"))
                total = 12;
        else if (strncmp(size, "metal", 5) == 0)
                total = 122;
        else if (streq(size, "xlarge") || (sscanf(size, "%u%15s", &n, rest) == 2 && streq(rest, "xlarge")))
                total = n == 1 ? 22 : n == 2 ? 42 : n < 16 ? 62 : 122;
        for (size_t i = 0; i < ELEMENTSOF(branch_exceptions); i++)
                if (streq(name, branch_exceptions[i].type))
                        total = branch_exceptions[i].total;
        return total > enis ? total - enis : 0;
}

static int add_type(Catalog *c, const cJSON *j, size_t idx, char **ret_error) {
        const char *name = json_str(j, "name");
        if (isempty(name) || strlen(name) > 64)
                return set_error(ret_error, "instance_types[%zu]: missing or bad \"name\"", idx);
        if (catalog_find(c, name) >= 0)
                return set_error(ret_error, "instance type %s: listed twice", name);
        const char *arch = json_str(j, "arch");
        if (!arch || (!streq(arch, "amd64") && !streq(arch, "arm64")))
                return set_error(ret_error, "instance type %s: \"arch\" must be amd64 or arm64", name);
        double vcpu, mem, enis = 0, ipv4 = 0, od = -1, spot = -1, d;
        if (!json_num(j, "vcpu", &vcpu) || vcpu <= 0 || vcpu > 100000)
                return set_error(ret_error, "instance type %s: bad \"vcpu\"", name);
        if (!json_num(j, "memory_mib", &mem) || mem <= 0 || mem > 1e9)
                return set_error(ret_error, "instance type %s: bad \"memory_mib\"", name);
        (void) json_num(j, "enis", &enis);
        (void) json_num(j, "ipv4_per_eni", &ipv4);
        if (enis < 0 || ipv4 < 0 || enis > 1000 || ipv4 > 1000)
                return set_error(ret_error, "instance type %s: bad ENI limits", name);
        if (json_num(j, "on_demand_price", &od) && od < 0)
                return set_error(ret_error, "instance type %s: negative \"on_demand_price\"", name);
        if (json_num(j, "spot_price", &spot) && spot < 0)
                return set_error(ret_error, "instance type %s: negative \"spot_price\"", name);
        const cJSON *zones = cJSON_GetObjectItemCaseSensitive(j, "zones");
        if (!cJSON_IsArray(zones) || cJSON_GetArraySize(zones) > 32)
                return set_error(ret_error, "instance type %s: \"zones\" must be a list of at most 32 zones", name);
        const cJSON *spot_prices = cJSON_GetObjectItemCaseSensitive(j, "spot_prices");
        if (spot_prices && !cJSON_IsObject(spot_prices))
                return set_error(ret_error, "instance type %s: \"spot_prices\" must be an object", name);

        /* types and their info grow together: info's capacity follows types' */
        size_t info_cap = c->cap;
        int r = GROW(c->types, c->cap, c->n + 1, (size_t) CATALOG_MAX_TYPES);
        if (r >= 0)
                r = GROW(c->info, info_cap, c->cap, (size_t) CATALOG_MAX_TYPES);
        if (r < 0)
                return r == -ENOBUFS ? set_error(ret_error, "more than %u instance types", CATALOG_MAX_TYPES) : r;
        SolverArena *a = c->arena;
        SolverInstanceType *t = &c->types[c->n];
        TypeInfo *ti = &c->info[c->n];
        *t = (SolverInstanceType) { .name = solver_arena_strdup(a, name) };
        *ti = (TypeInfo) { .enis = (uint32_t) enis, .ipv4_per_eni = (uint32_t) ipv4 };
        if (!t->name)
                return -ENOMEM;

        /* capacity */
        ti->nominal.v[SOLVER_RES_CPU] = (int64_t) vcpu * 1000;
        ti->nominal.v[SOLVER_RES_MEMORY] = (int64_t) mem * MI;
        const char *gman = json_str(j, "gpu_manufacturer");
        double gpus = 0, neuron = 0;
        (void) json_num(j, "gpu_count", &gpus);
        (void) json_num(j, "neuron_count", &neuron);
        if (gpus > 0)
                ti->nominal.v[gman && streq(gman, "amd") ? SOLVER_RES_AMD_GPU : SOLVER_RES_NVIDIA_GPU] = (int64_t) gpus;
        if (neuron > 0)
                ti->nominal.v[SOLVER_RES_NEURON] = (int64_t) neuron;
        double nvme = 0;
        if (json_num(j, "local_nvme_gib", &nvme) && nvme > 0 && nvme < 1e7)
                ti->local_nvme_bytes = (int64_t) nvme * (1LL << 30);

        /* labels */
        SolverLabel *l = solver_arena_alloc(a, 32 * sizeof(SolverLabel));
        if (!l)
                return -ENOMEM;
        size_t nl = 0;
        const char *dot = strchr(name, '.');
        char family[64], cat[32], gen[16];
        snprintf(family, sizeof(family), "%.*s", dot ? (int) (dot - name) : (int) strlen(name), name);
        split_family(family, cat, sizeof(cat), gen, sizeof(gen));
        /* security groups for pods: Nitro types, no burstable (t) family; bare metal types
         * follow their family (catalog_load_json) */
        const cJSON *metal = cJSON_GetObjectItemCaseSensitive(j, "bare_metal");
        const char *hyp = json_str(j, "hypervisor");
        if (!streq(cat, "t") && hyp && streq(hyp, "nitro"))
                ti->nominal.v[SOLVER_RES_POD_ENI] = pod_eni_branches(name, dot ? dot + 1 : NULL, ti->enis);
        ti->metal_trunk = !streq(cat, "t") && cJSON_IsTrue(metal);
        compute_allocatable(ti, NULL, 0, &t->capacity, &t->allocatable);
        r = 0;
        r = r ?: add_label(a, l, &nl, SOLVER_LABEL_INSTANCE_TYPE, "%s", name);
        r = r ?: add_label(a, l, &nl, SOLVER_LABEL_ARCH, "%s", arch);
        r = r ?: add_label(a, l, &nl, SOLVER_LABEL_OS, "linux");
        if (!isempty(c->region))
                r = r ?: add_label(a, l, &nl, SOLVER_LABEL_REGION, "%s", c->region);
        r = r ?: add_label(a, l, &nl, "nodesmith.io/instance-family", "%s", family);
        r = r ?: add_label(a, l, &nl, "nodesmith.io/instance-category", "%s", cat);
        if (gen[0])
                r = r ?: add_label(a, l, &nl, "nodesmith.io/instance-generation", "%s", gen);
        if (dot)
                r = r ?: add_label(a, l, &nl, "nodesmith.io/instance-size", "%s", dot + 1);
        r = r ?: add_label(a, l, &nl, "nodesmith.io/instance-cpu", "%d", (int) vcpu);
        r = r ?: add_label(a, l, &nl, "nodesmith.io/instance-memory", "%.0f", mem);
        const char *s;
        if ((s = json_str(j, "cpu_manufacturer")) && *s)
                r = r ?: add_label(a, l, &nl, "nodesmith.io/instance-cpu-manufacturer", "%s", s);
        if ((s = json_str(j, "hypervisor")) && *s)
                r = r ?: add_label(a, l, &nl, "nodesmith.io/instance-hypervisor", "%s", s);
        const cJSON *eit = cJSON_GetObjectItemCaseSensitive(j, "encryption_in_transit");
        if (cJSON_IsBool(eit))
                r = r ?: add_label(a, l, &nl, "nodesmith.io/instance-encryption-in-transit-supported", "%s",
                                   cJSON_IsTrue(eit) ? "true" : "false");
        if (json_num(j, "network_bandwidth_mbps", &d))
                r = r ?: add_label(a, l, &nl, "nodesmith.io/instance-network-bandwidth", "%.0f", d);
        if (json_num(j, "local_nvme_gib", &d))
                r = r ?: add_label(a, l, &nl, "nodesmith.io/instance-local-nvme", "%.0f", d);
        if (json_num(j, "sustained_clock_mhz", &d))
                r = r ?: add_label(a, l, &nl, "nodesmith.io/instance-cpu-sustained-clock-speed-mhz", "%.0f", d);
        if (json_num(j, "ebs_bandwidth_mbps", &d))
                r = r ?: add_label(a, l, &nl, "nodesmith.io/instance-ebs-bandwidth", "%.0f", d);
        if (json_num(j, "accelerator_count", &d) && d > 0) {
                r = r ?: add_label(a, l, &nl, "nodesmith.io/instance-accelerator-count", "%.0f", d);
                if ((s = json_str(j, "accelerator_name")) && *s)
                        r = r ?: add_label(a, l, &nl, "nodesmith.io/instance-accelerator-name", "%s", s);
                if ((s = json_str(j, "accelerator_manufacturer")) && *s)
                        r = r ?: add_label(a, l, &nl, "nodesmith.io/instance-accelerator-manufacturer", "%s", s);
        }
        /* nodesmith launches shared-tenancy instances only; flex types are the "-flex" families */
        r = r ?: add_label(a, l, &nl, "nodesmith.io/instance-tenancy", "default");
        r = r ?: add_label(a, l, &nl, "nodesmith.io/instance-capability-flex", "%s",
                           strstr(family, "-flex") ? "true" : "false");
        r = r ?: add_label(a, l, &nl, "nodesmith.io/instance-gpu-count", "%.0f", gpus);
        if (gpus > 0) {
                if ((s = json_str(j, "gpu_name")) && *s)
                        r = r ?: add_label(a, l, &nl, "nodesmith.io/instance-gpu-name", "%s", s);
                if (gman && *gman)
                        r = r ?: add_label(a, l, &nl, "nodesmith.io/instance-gpu-manufacturer", "%s", gman);
                if (json_num(j, "gpu_memory_mib", &d))
                        r = r ?: add_label(a, l, &nl, "nodesmith.io/instance-gpu-memory", "%.0f", d);
        }
        if (r < 0)
                return r;
        t->labels = l;
        t->n_labels = nl;

        /* offerings: zones x (on-demand, spot) */
        int nz = cJSON_GetArraySize(zones);
        SolverOffering *o = solver_arena_alloc(a, ((size_t) nz * 2 + 1) * sizeof(SolverOffering));
        if (!o)
                return -ENOMEM;
        size_t no = 0;
        const cJSON *z;
        cJSON_ArrayForEach(z, zones) {
                if (!cJSON_IsString(z) || isempty(z->valuestring))
                        return set_error(ret_error, "instance type %s: \"zones\" must hold strings", name);
                const char *zone = solver_arena_strdup(a, z->valuestring);
                if (!zone)
                        return -ENOMEM;
                if (od >= 0)
                        o[no++] = (SolverOffering) { zone, SOLVER_CAPACITY_ON_DEMAND, od, true };
                double sp = spot;
                const cJSON *zs = spot_prices ? cJSON_GetObjectItemCaseSensitive(spot_prices, zone) : NULL;
                if (cJSON_IsNumber(zs))
                        sp = zs->valuedouble;
                if (sp >= 0)
                        o[no++] = (SolverOffering) { zone, SOLVER_CAPACITY_SPOT, sp, true };
        }
        t->offerings = o;
        t->n_offerings = no;
        c->n++;
        c->generation++;
        return 0;
}

static const char *family_of(const SolverInstanceType *t) {
        for (size_t i = 0; i < t->n_labels; i++)
                if (streq(t->labels[i].key, "nodesmith.io/instance-family"))
                        return t->labels[i].value;
        return "";
}

/* A bare metal type (DescribeInstanceTypes gives it no hypervisor) has the branch interfaces of
 * its size when its family runs on Nitro, as the VPC resource controller lists c5.metal. */
static void metal_pod_eni(Catalog *c) {
        for (size_t i = 0; i < c->n; i++) {
                TypeInfo *ti = &c->info[i];
                if (!ti->metal_trunk || ti->nominal.v[SOLVER_RES_POD_ENI] > 0)
                        continue;
                const char *fam = family_of(&c->types[i]), *dot = strchr(c->types[i].name, '.');
                for (size_t k = 0; k < c->n; k++)
                        if (k != i && c->info[k].nominal.v[SOLVER_RES_POD_ENI] > 0 && streq(family_of(&c->types[k]), fam)) {
                                ti->nominal.v[SOLVER_RES_POD_ENI] = pod_eni_branches(c->types[i].name, dot ? dot + 1 : NULL, ti->enis);
                                compute_allocatable(ti, NULL, 0, &c->types[i].capacity, &c->types[i].allocatable);
                                c->generation++;
                                break;
                        }
        }
}

int catalog_load_json(Catalog *c, const cJSON *root, char **ret_error) {
        if (!cJSON_IsObject(root))
                return set_error(ret_error, "catalog: not a JSON object");
        const char *region = json_str(root, "region");
        if (region && isempty(c->region)) {
                char *nr = strdup(region);
                if (!nr)
                        return -ENOMEM;
                free(c->region);
                c->region = nr;
        }
        const cJSON *types = cJSON_GetObjectItemCaseSensitive(root, "instance_types");
        if (!cJSON_IsArray(types))
                return set_error(ret_error, "catalog: \"instance_types\" must be a list");
        if (cJSON_GetArraySize(types) > SOLVER_MAX_TYPES)
                return set_error(ret_error, "catalog: more than %d instance types", SOLVER_MAX_TYPES);
        size_t i = 0;
        const cJSON *t;
        cJSON_ArrayForEach(t, types) {
                int r = add_type(c, t, i++, ret_error);
                if (r < 0)
                        return r;
        }
        metal_pod_eni(c);
        return 0;
}

int catalog_load_file(const char *path, Catalog **ret, char **ret_error) {
        _cleanup_free_ char *text = NULL;
        size_t n = 0;
        int r = read_file_bounded(path, CATALOG_MAX_FILE, &text, &n);
        if (r == -EFBIG)
                return set_error(ret_error, "%s: larger than %u bytes", path, CATALOG_MAX_FILE);
        if (r < 0) {
                if (ret_error && asprintf(ret_error, "%s: %s", path, strerror(-r)) < 0)
                        *ret_error = NULL;
                return r;
        }
        cJSON *root = cJSON_ParseWithLength(text, n);
        if (!root)
                return set_error(ret_error, "%s: not valid JSON", path);
        _cleanup_(catalog_freep) Catalog *c = NULL;
        r = catalog_new(NULL, &c);
        if (r >= 0)
                r = catalog_load_json(c, root, ret_error);
        cJSON_Delete(root);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(c);
        return 0;
}

int catalog_learn(Catalog *c, const char *name, const SolverResources *capacity,
                  const SolverResources *allocatable) {
        int i = catalog_find(c, name);
        if (i < 0)
                return -ENOENT;
        if (!capacity || !allocatable)
                return -EINVAL;
        for (int r = 0; r < _SOLVER_RES_MAX; r++)
                if (allocatable->v[r] < 0 || capacity->v[r] < 0 || allocatable->v[r] > capacity->v[r])
                        return -EINVAL;
        if (allocatable->v[SOLVER_RES_CPU] <= 0 || allocatable->v[SOLVER_RES_MEMORY] <= 0 ||
            allocatable->v[SOLVER_RES_PODS] <= 0)
                return -EINVAL;
        TypeInfo *ti = &c->info[i];
        ti->learned = true;
        ti->learned_mem_capacity = capacity->v[SOLVER_RES_MEMORY];
        SolverInstanceType *t = &c->types[i];
        t->capacity = *capacity;
        t->allocatable = *allocatable;
        c->generation++;
        log_debug("catalog: learned allocatable of %s", name);
        return 0;
}

bool catalog_is_learned(const Catalog *c, const char *name) {
        int i = catalog_find(c, name);
        return i >= 0 && c->info[i].learned;
}

static bool kubelet_eq(const SolverKubelet *a, const SolverKubelet *b) {
        return a->max_pods == b->max_pods && a->pods_per_core == b->pods_per_core &&
               a->has_kube_reserved_cpu == b->has_kube_reserved_cpu &&
               a->has_kube_reserved_memory == b->has_kube_reserved_memory &&
               a->has_system_reserved_cpu == b->has_system_reserved_cpu &&
               a->has_system_reserved_memory == b->has_system_reserved_memory &&
               a->has_eviction_memory == b->has_eviction_memory &&
               (!a->has_kube_reserved_cpu || a->kube_reserved_cpu == b->kube_reserved_cpu) &&
               (!a->has_kube_reserved_memory || a->kube_reserved_memory == b->kube_reserved_memory) &&
               (!a->has_system_reserved_cpu || a->system_reserved_cpu == b->system_reserved_cpu) &&
               (!a->has_system_reserved_memory || a->system_reserved_memory == b->system_reserved_memory) &&
               (!a->has_eviction_memory || a->eviction_memory == b->eviction_memory) &&
               a->has_eviction_memory_pct == b->has_eviction_memory_pct &&
               (!a->has_eviction_memory_pct || a->eviction_memory_pct == b->eviction_memory_pct) &&
               a->has_eviction_nodefs == b->has_eviction_nodefs &&
               (!a->has_eviction_nodefs || a->eviction_nodefs == b->eviction_nodefs) &&
               a->has_eviction_nodefs_pct == b->has_eviction_nodefs_pct &&
               (!a->has_eviction_nodefs_pct || a->eviction_nodefs_pct == b->eviction_nodefs_pct) &&
               a->has_kube_reserved_ephemeral == b->has_kube_reserved_ephemeral &&
               (!a->has_kube_reserved_ephemeral || a->kube_reserved_ephemeral == b->kube_reserved_ephemeral) &&
               a->has_system_reserved_ephemeral == b->has_system_reserved_ephemeral &&
               (!a->has_system_reserved_ephemeral || a->system_reserved_ephemeral == b->system_reserved_ephemeral) &&
               a->instance_store_raid0 == b->instance_store_raid0;
}

int catalog_allocatable_for(Catalog *c, const SolverKubelet *kubelet, int64_t root_volume_bytes,
                            const SolverResources **ret) {
        static const SolverKubelet none = {};
        if (!kubelet)
                kubelet = &none;
        if (root_volume_bytes < 0)
                return -EINVAL;
        for (size_t i = 0; i < c->n_pa; i++) {
                PoolAlloc *p = &c->pa[i];
                if (kubelet_eq(&p->kubelet, kubelet) && p->root == root_volume_bytes) {
                        if (p->generation != c->generation)
                                break;
                        *ret = p->alloc;
                        return 0;
                }
        }
        SolverResources *alloc = calloc(c->n + 1, sizeof(SolverResources));
        if (!alloc)
                return -ENOMEM;
        bool is_default = kubelet_eq(kubelet, &none);
        for (size_t i = 0; i < c->n; i++) {
                SolverResources cap;
                if (c->info[i].learned && is_default) {
                        alloc[i] = c->types[i].allocatable;
                        if (root_volume_bytes > 0 && c->types[i].capacity.v[SOLVER_RES_EPHEMERAL] > 0)
                                alloc[i].v[SOLVER_RES_EPHEMERAL] +=
                                        (root_volume_bytes - c->types[i].capacity.v[SOLVER_RES_EPHEMERAL]) * 9 / 10;
                } else
                        compute_allocatable(&c->info[i], kubelet, root_volume_bytes, &cap, &alloc[i]);
        }
        PoolAlloc *np = realloc(c->pa, (c->n_pa + 1) * sizeof(PoolAlloc));
        if (!np) {
                free(alloc);
                return -ENOMEM;
        }
        c->pa = np;
        c->pa[c->n_pa++] = (PoolAlloc) { .kubelet = *kubelet, .root = root_volume_bytes, .alloc = alloc,
                                         .generation = c->generation };
        *ret = alloc;
        return 0;
}
