/* SPDX-License-Identifier: Apache-2.0 */
/* Provisioning rounds (coordinator/provision/), driven through provisioner.h with the EC2 client
 * and the Kubernetes client replaced at their seams (tests/unit/test-coord-provision-rounds.wrap:
 * the ec2_* calls the provisioner makes answer from a script; kube-seam.h stands for the API
 * server). The solver and everything between it and CreateFleet are the real ones, on a small
 * catalog written by the test (t3.medium, c5.large, m5.large, m5.xlarge in us-east-1a and b).
 *
 * Covered: a batch of pending pods closes into one round that launches the solver's plan (the
 * CreateFleet requests: types, zones and their subnets, capacity type, count, a ClientToken that
 * stays the same when the same plan is tried again), identical nodes in one CreateFleet and its
 * partial fulfilment; insufficient capacity for one offering
 * takes it out and the next round launches elsewhere; a partial fleet; throttling; in-flight
 * instances count against NodePool limits and are never launched twice; an instance whose Node
 * never registers is terminated after the registration timeout; a drained node with the
 * termination finalizer is terminated and loses the finalizer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent-report.h"
#include "aws/ec2.h"
#include "coordinator/provision/provisioner.h"
#include "kube-seam.h"
#include "log.h"
#include "metric-text.h"
#include "solver/solver.h"

#define PODS "/api/v1/pods"
#define NODES "/api/v1/nodes"
#define NODEPOOLS "/apis/nodesmith.io/v1/nodepools"

/* ---- EC2 at its seam ---------------------------------------------------------------------- */

typedef enum FleetAnswer {
        FLEET_LAUNCH,          /* one instance of the first override */
        FLEET_ICE,             /* the call fails: InsufficientInstanceCapacity */
        FLEET_ICE_FIRST,       /* no instance; the first override's error is insufficient capacity */
        FLEET_PARTIAL,         /* the first override has no capacity, the second launches */
        FLEET_THROTTLED,       /* the call fails: RequestLimitExceeded, after the client's retries */
        FLEET_SHORT,           /* one instance fewer than asked, of the first override, whose
                                * capacity ran out (its error beside them) */
} FleetAnswer;

#define MAX_OV 16
typedef struct FleetCall {
        char token[64], nodepool[64], template_name[160];
        Ec2CapacityType capacity_type;
        unsigned target;
        size_t n;
        char type[MAX_OV][32], zone[MAX_OV][32], subnet[MAX_OV][32];
} FleetCall;

typedef enum Ec2Op {
        OP_SUBNETS, OP_SGS, OP_SSM, OP_TEMPLATE, OP_FLEET, OP_CLUSTER_INSTANCES, OP_INSTANCES_BY_ID, OP_TERMINATE,
} Ec2Op;

typedef struct Ec2Answer {
        Ec2Op op;
        Ec2Client *c;
        void *done;
        void *userdata;
        bool failed;
        Ec2Error err;
        void *result;
        sd_event_source *source;
        struct Ec2Answer *next;
} Ec2Answer;

static struct {
        FleetAnswer script[16];
        size_t n_script, next_script;
        FleetCall fleets[32];
        size_t n_fleets;
        char terminated[16][32];
        size_t n_terminated;
        unsigned instances, templates, subnet_lookups, unexpected;
        bool hold_fleets;      /* CreateFleet answers wait for fleets_release() */
        Ec2Answer *answers;
} ec2;

/* An answer never delivered: its result goes with it. */
static void answer_discard(Ec2Answer *a) {
        switch (a->op) {
        case OP_SUBNETS:
                ec2_subnet_list_free(a->result);
                break;
        case OP_SGS:
                ec2_security_group_list_free(a->result);
                break;
        case OP_SSM:
                free(a->result);
                break;
        case OP_TEMPLATE:
                ec2_launch_template_free(a->result);
                break;
        case OP_FLEET:
                ec2_fleet_result_free(a->result);
                break;
        case OP_CLUSTER_INSTANCES:
        case OP_INSTANCES_BY_ID:
                ec2_instance_list_free(a->result);
                break;
        case OP_TERMINATE:
                ec2_terminate_result_free(a->result);
                break;
        }
        a->result = NULL;
}

static void answer_free(Ec2Answer *a) {
        for (Ec2Answer **pp = &ec2.answers; *pp; pp = &(*pp)->next)
                if (*pp == a) {
                        *pp = a->next;
                        break;
                }
        sd_event_source_disable_unref(a->source);
        free(a);
}

static int on_answer(sd_event_source *s, void *userdata) {
        Ec2Answer *a = userdata;
        const Ec2Error *err = a->failed ? &a->err : NULL;
        switch (a->op) {
        case OP_SUBNETS:
                ((ec2_subnets_done_t) a->done)(a->c, err, a->result, a->userdata);
                break;
        case OP_SGS:
                ((ec2_security_groups_done_t) a->done)(a->c, err, a->result, a->userdata);
                break;
        case OP_SSM:
                ((ec2_ssm_parameter_done_t) a->done)(a->c, err, a->result, a->userdata);
                break;
        case OP_TEMPLATE:
                ((ec2_launch_template_done_t) a->done)(a->c, err, a->result, a->userdata);
                break;
        case OP_FLEET:
                ((ec2_fleet_done_t) a->done)(a->c, err, a->result, a->userdata);
                break;
        case OP_CLUSTER_INSTANCES:
        case OP_INSTANCES_BY_ID:
                ((ec2_instances_done_t) a->done)(a->c, err, a->result, a->userdata);
                break;
        case OP_TERMINATE:
                ((ec2_terminate_done_t) a->done)(a->c, err, a->result, a->userdata);
                break;
        }
        answer_free(a);
        return 0;
}

/* The answer comes from the loop, as EC2's would. */
static int answer(Ec2Op op, Ec2Client *c, void *done, void *userdata, void *result, const Ec2Error *err) {
        Ec2Answer *a = calloc(1, sizeof *a);
        assert_non_null(a);
        *a = (Ec2Answer) { .op = op, .c = c, .done = done, .userdata = userdata, .result = result };
        if (err) {
                a->failed = true;
                a->err = *err;
        }
        assert_int_equal(sd_event_add_defer(world.event, &a->source, on_answer, a), 0);
        if (op == OP_FLEET && ec2.hold_fleets)
                assert_int_equal(sd_event_source_set_enabled(a->source, SD_EVENT_OFF), 0);
        a->next = ec2.answers;
        ec2.answers = a;
        return 0;
}

/* The CreateFleet answers held back come now. */
static void fleets_release(void) {
        ec2.hold_fleets = false;
        for (Ec2Answer *a = ec2.answers; a; a = a->next)
                if (a->op == OP_FLEET)
                        assert_int_equal(sd_event_source_set_enabled(a->source, SD_EVENT_ONESHOT), 0);
}

static Ec2Error ec2_error(Ec2ErrorKind kind, const char *code) {
        Ec2Error e = { .kind = kind, .error = ec2_error_kind_to_errno(kind), .status = 400, .attempts = 1 };
        snprintf(e.code, sizeof e.code, "%s", code);
        snprintf(e.message, sizeof e.message, "%s (from the test's EC2)", code);
        return e;
}

static char *xstrdup(const char *s) {
        char *d = strdup(s);
        assert_non_null(d);
        return d;
}

int __wrap_ec2_describe_subnets(Ec2Client *c, const char *const *ids, const Ec2Filter *filters, size_t n_filters,
                                ec2_subnets_done_t done, void *userdata);
int __wrap_ec2_describe_subnets(Ec2Client *c, const char *const *ids, const Ec2Filter *filters, size_t n_filters,
                                ec2_subnets_done_t done, void *userdata) {
        static const char *const sn[][2] = { { "subnet-a", "us-east-1a" }, { "subnet-b", "us-east-1b" } };
        Ec2SubnetList *l = calloc(1, sizeof *l);
        assert_non_null(l);
        l->items = calloc(ELEMENTSOF(sn), sizeof *l->items);
        assert_non_null(l->items);
        for (size_t i = 0; i < ELEMENTSOF(sn); i++)
                l->items[l->n++] = (Ec2Subnet) { .id = xstrdup(sn[i][0]), .vpc_id = xstrdup("vpc-1"),
                                                 .zone = xstrdup(sn[i][1]), .available_ips = 200 - 50 * i };
        ec2.subnet_lookups++;
        return answer(OP_SUBNETS, c, done, userdata, l, NULL);
}

int __wrap_ec2_describe_security_groups(Ec2Client *c, const char *const *ids, const Ec2Filter *filters,
                                        size_t n_filters, ec2_security_groups_done_t done, void *userdata);
int __wrap_ec2_describe_security_groups(Ec2Client *c, const char *const *ids, const Ec2Filter *filters,
                                        size_t n_filters, ec2_security_groups_done_t done, void *userdata) {
        Ec2SecurityGroupList *l = calloc(1, sizeof *l);
        assert_non_null(l);
        l->items = calloc(1, sizeof *l->items);
        assert_non_null(l->items);
        l->items[l->n++] = (Ec2SecurityGroup) { .id = xstrdup("sg-1"), .name = xstrdup("nodes"), .vpc_id = xstrdup("vpc-1") };
        return answer(OP_SGS, c, done, userdata, l, NULL);
}

int __wrap_ec2_ssm_get_parameter(Ec2Client *c, const char *name, ec2_ssm_parameter_done_t done, void *userdata);
int __wrap_ec2_ssm_get_parameter(Ec2Client *c, const char *name, ec2_ssm_parameter_done_t done, void *userdata) {
        return answer(OP_SSM, c, done, userdata, xstrdup("ami-0123456789abcdef0"), NULL);
}

int __wrap_ec2_create_launch_template(Ec2Client *c, const Ec2LaunchTemplateSpec *spec, ec2_launch_template_done_t done,
                                      void *userdata);
int __wrap_ec2_create_launch_template(Ec2Client *c, const Ec2LaunchTemplateSpec *spec, ec2_launch_template_done_t done,
                                      void *userdata) {
        assert_string_equal(spec->image_id, "ami-0123456789abcdef0");
        assert_string_equal(spec->security_group_ids[0], "sg-1");
        Ec2LaunchTemplate *t = calloc(1, sizeof *t);
        assert_non_null(t);
        *t = (Ec2LaunchTemplate) { .id = xstrdup("lt-1"), .name = xstrdup(spec->name), .version = 1 };
        ec2.templates++;
        return answer(OP_TEMPLATE, c, done, userdata, t, NULL);
}

static void fleet_error_add(Ec2FleetResult *r, const FleetCall *call, size_t i) {
        r->errors = calloc(1, sizeof *r->errors);
        assert_non_null(r->errors);
        r->errors[0] = (Ec2FleetError) { .code = xstrdup("InsufficientInstanceCapacity"),
                                         .message = xstrdup("We currently do not have sufficient capacity."),
                                         .lifecycle = xstrdup(call->capacity_type == EC2_CAPACITY_SPOT ? "spot" : "on-demand"),
                                         .instance_type = xstrdup(call->type[i]), .zone = xstrdup(call->zone[i]),
                                         .subnet_id = xstrdup(call->subnet[i]) };
        r->n_errors = 1;
}

/* count instances of override i (one entry of the answer's fleetInstanceSet, as EC2 groups them). */
static void fleet_instances_add(Ec2FleetResult *r, const FleetCall *call, size_t i, size_t count) {
        r->instances = calloc(1, sizeof *r->instances);
        assert_non_null(r->instances);
        r->instances[0].instance_ids = calloc(count + 1, sizeof(char *));
        assert_non_null(r->instances[0].instance_ids);
        for (size_t k = 0; k < count; k++) {
                char id[32];
                snprintf(id, sizeof id, "i-%017u", ++ec2.instances);
                r->instances[0].instance_ids[k] = xstrdup(id);
        }
        r->instances[0].instance_type = xstrdup(call->type[i]);
        r->instances[0].zone = xstrdup(call->zone[i]);
        r->instances[0].subnet_id = xstrdup(call->subnet[i]);
        r->instances[0].lifecycle = xstrdup(call->capacity_type == EC2_CAPACITY_SPOT ? "spot" : "on-demand");
        r->n_instances = 1;
}

int __wrap_ec2_create_fleet(Ec2Client *c, const Ec2FleetSpec *spec, ec2_fleet_done_t done, void *userdata);
int __wrap_ec2_create_fleet(Ec2Client *c, const Ec2FleetSpec *spec, ec2_fleet_done_t done, void *userdata) {
        assert_true(ec2.n_fleets < ELEMENTSOF(ec2.fleets));
        FleetCall *call = &ec2.fleets[ec2.n_fleets++];
        *call = (FleetCall) { .capacity_type = spec->capacity_type, .target = spec->target_capacity,
                              .n = MIN(spec->n_overrides, (size_t) MAX_OV) };
        snprintf(call->token, sizeof call->token, "%s", spec->client_token);
        snprintf(call->nodepool, sizeof call->nodepool, "%s", spec->nodepool);
        snprintf(call->template_name, sizeof call->template_name, "%s", strempty(spec->launch_template_name));
        for (size_t i = 0; i < call->n; i++) {
                snprintf(call->type[i], sizeof call->type[i], "%s", spec->overrides[i].instance_type);
                snprintf(call->zone[i], sizeof call->zone[i], "%s", strempty(spec->overrides[i].availability_zone));
                snprintf(call->subnet[i], sizeof call->subnet[i], "%s", strempty(spec->overrides[i].subnet_id));
        }
        FleetAnswer how = ec2.next_script < ec2.n_script ? ec2.script[ec2.next_script++] : FLEET_LAUNCH;
        if (how == FLEET_ICE || how == FLEET_THROTTLED) {
                Ec2Error e = how == FLEET_ICE ? ec2_error(EC2_ERROR_INSUFFICIENT_CAPACITY, "InsufficientInstanceCapacity")
                                              : ec2_error(EC2_ERROR_THROTTLED, "RequestLimitExceeded");
                return answer(OP_FLEET, c, done, userdata, NULL, &e);
        }
        Ec2FleetResult *r = calloc(1, sizeof *r);
        assert_non_null(r);
        r->fleet_id = xstrdup("fleet-1");
        if (how == FLEET_LAUNCH)
                fleet_instances_add(r, call, 0, call->target);
        else if (how == FLEET_SHORT) {
                assert_true(call->target >= 2);
                fleet_error_add(r, call, 0);
                fleet_instances_add(r, call, 0, call->target - 1);
        } else {
                fleet_error_add(r, call, 0);
                if (how == FLEET_PARTIAL) {
                        assert_true(call->n >= 2);
                        fleet_instances_add(r, call, 1, call->target);
                }
        }
        return answer(OP_FLEET, c, done, userdata, r, NULL);
}

int __wrap_ec2_describe_cluster_instances(Ec2Client *c, const char *const *states, const Ec2Filter *filters,
                                          size_t n_filters, ec2_instances_done_t done, void *userdata);
int __wrap_ec2_describe_cluster_instances(Ec2Client *c, const char *const *states, const Ec2Filter *filters,
                                          size_t n_filters, ec2_instances_done_t done, void *userdata) {
        Ec2InstanceList *l = calloc(1, sizeof *l); /* a new cluster: nothing launched before */
        assert_non_null(l);
        return answer(OP_CLUSTER_INSTANCES, c, done, userdata, l, NULL);
}

int __wrap_ec2_describe_instances_by_id(Ec2Client *c, const char *const *ids, ec2_instances_done_t done,
                                        void *userdata);
int __wrap_ec2_describe_instances_by_id(Ec2Client *c, const char *const *ids, ec2_instances_done_t done,
                                        void *userdata) {
        Ec2InstanceList *l = calloc(1, sizeof *l);
        assert_non_null(l);
        return answer(OP_INSTANCES_BY_ID, c, done, userdata, l, NULL);
}

int __wrap_ec2_terminate_instances(Ec2Client *c, const char *const *ids, ec2_terminate_done_t done, void *userdata);
int __wrap_ec2_terminate_instances(Ec2Client *c, const char *const *ids, ec2_terminate_done_t done, void *userdata) {
        Ec2TerminateResult *r = calloc(1, sizeof *r);
        size_t n = 0;
        while (ids[n])
                n++;
        assert_non_null(r);
        r->terminated = calloc(n + 1, sizeof(char *));
        r->refused = calloc(1, sizeof(char *));
        assert_non_null(r->terminated);
        assert_non_null(r->refused);
        for (size_t i = 0; i < n; i++) {
                assert_true(ec2.n_terminated < ELEMENTSOF(ec2.terminated));
                snprintf(ec2.terminated[ec2.n_terminated++], sizeof ec2.terminated[0], "%s", ids[i]);
                r->terminated[i] = xstrdup(ids[i]);
        }
        return answer(OP_TERMINATE, c, done, userdata, r, NULL);
}

/* EC2 calls no test here expects (the catalog and images are not refreshed, no role is made):
 * counted, and answered with an error. */
static int unexpected(const char *what) {
        ec2.unexpected++;
        print_error("unexpected EC2 call %s\n", what);
        return -EOPNOTSUPP;
}

int __wrap_ec2_describe_instance_types(Ec2Client *c, const char *const *names, const Ec2Filter *filters,
                                       size_t n_filters, ec2_instance_types_done_t done, void *userdata);
int __wrap_ec2_describe_instance_types(Ec2Client *c, const char *const *names, const Ec2Filter *filters,
                                       size_t n_filters, ec2_instance_types_done_t done, void *userdata) {
        return unexpected("DescribeInstanceTypes");
}

int __wrap_ec2_describe_images(Ec2Client *c, const char *const *ids, const char *const *owners, const Ec2Filter *filters,
                               size_t n_filters, ec2_images_done_t done, void *userdata);
int __wrap_ec2_describe_images(Ec2Client *c, const char *const *ids, const char *const *owners, const Ec2Filter *filters,
                               size_t n_filters, ec2_images_done_t done, void *userdata) {
        return unexpected("DescribeImages");
}

int __wrap_ec2_iam_instance_profile(Ec2Client *c, const Ec2IamRequest *req, ec2_iam_done_t done, void *userdata);
int __wrap_ec2_iam_instance_profile(Ec2Client *c, const Ec2IamRequest *req, ec2_iam_done_t done, void *userdata) {
        return unexpected("IAM instance profile");
}

int __wrap_ec2_create_tags(Ec2Client *c, const char *const *resource_ids, const Ec2Tag *tags, size_t n_tags,
                           ec2_done_t done, void *userdata);
int __wrap_ec2_create_tags(Ec2Client *c, const char *const *resource_ids, const Ec2Tag *tags, size_t n_tags,
                           ec2_done_t done, void *userdata) {
        return unexpected("CreateTags");
}

/* ---- the fixture -------------------------------------------------------------------------- */

static const char catalog_json[] =
        "{\"region\":\"us-east-1\",\"zones\":[\"us-east-1a\",\"us-east-1b\"],\"instance_types\":["
        "{\"name\":\"t3.medium\",\"arch\":\"amd64\",\"vcpu\":2,\"memory_mib\":4096,\"enis\":3,\"ipv4_per_eni\":6,"
        "\"hypervisor\":\"nitro\",\"on_demand_price\":0.0416,\"spot_price\":0.01456,\"zones\":[\"us-east-1a\",\"us-east-1b\"]},"
        "{\"name\":\"c5.large\",\"arch\":\"amd64\",\"vcpu\":2,\"memory_mib\":4096,\"enis\":3,\"ipv4_per_eni\":10,"
        "\"hypervisor\":\"nitro\",\"on_demand_price\":0.085,\"spot_price\":0.02975,\"zones\":[\"us-east-1a\",\"us-east-1b\"]},"
        "{\"name\":\"m5.large\",\"arch\":\"amd64\",\"vcpu\":2,\"memory_mib\":8192,\"enis\":3,\"ipv4_per_eni\":10,"
        "\"hypervisor\":\"nitro\",\"on_demand_price\":0.096,\"spot_price\":0.0336,\"zones\":[\"us-east-1a\",\"us-east-1b\"]},"
        "{\"name\":\"m5.xlarge\",\"arch\":\"amd64\",\"vcpu\":4,\"memory_mib\":16384,\"enis\":4,\"ipv4_per_eni\":15,"
        "\"hypervisor\":\"nitro\",\"on_demand_price\":0.192,\"spot_price\":0.0672,\"zones\":[\"us-east-1a\",\"us-east-1b\"]}]}";

/* What the ports saw: each round's plan as launched, and the launches. */
typedef struct PlannedLaunch {
        char type[32], zone[32];
        SolverCapacityType capacity_type;
        size_t n_pods;
        char first_pod[64];    /* the name of its first pod */
} PlannedLaunch;

typedef struct Fx {
        sd_event *event;
        Registry registry;
        Provisioner *p;
        char catalog[64], agent_ca[64];
        ProvisionerConfig cfg;
        unsigned decided, launched, launch_failed;
        bool not_acting;          /* the Lease is not renewed in time (ports.acting) */
        size_t last_unschedulable;
        PlannedLaunch plan[16];
        size_t n_plan;
} Fx;

static void on_decided(void *userdata, const Round *rd) {
        Fx *f = userdata;
        const SolverResult *res = provisioner_round_result(rd);
        const SolverSnapshot *snap = provisioner_round_snapshot(rd);
        f->decided++;
        f->last_unschedulable = res->n_unschedulable;
        f->n_plan = 0;
        for (size_t i = 0; i < res->n_launches && i < ELEMENTSOF(f->plan); i++) {
                const SolverLaunch *l = &res->launches[i];
                PlannedLaunch *pl = &f->plan[f->n_plan++];
                snprintf(pl->type, sizeof pl->type, "%s", snap->types[l->offerings[0].type].name);
                snprintf(pl->zone, sizeof pl->zone, "%s", l->offerings[0].zone);
                pl->capacity_type = l->capacity_type;
                pl->n_pods = l->n_pods;
                snprintf(pl->first_pod, sizeof pl->first_pod, "%s", l->n_pods ? strempty(snap->pods[l->pods[0]].name) : "");
        }
}

static void on_launched(void *userdata, const char *instance_id, const char *instance_type, const char *zone,
                        const char *capacity_type, const Round *rd, const SolverLaunch *l) {
        ((Fx *) userdata)->launched++;
}

static void on_launch_failed(void *userdata, const Round *rd, const SolverLaunch *l, const char *step, const char *code,
                             const char *message) {
        ((Fx *) userdata)->launch_failed++;
}

static bool acting(void *userdata) {
        return !((Fx *) userdata)->not_acting;
}

static bool never(void *userdata) {
        return false;
}

/* Runs the loop for ms. */
static void run_for(unsigned ms) {
        (void) world_run_until(never, NULL, ms);
}

static bool watches_synced(void *userdata) {
        Fx *f = userdata;
        for (ProvisionerWatch w = 0; w < _PROVISIONER_WATCH_MAX; w++)
                if (!kube_watch_synced(provisioner_watch(f->p, w)))
                        return false;
        return true;
}

/* No batch open and no round running. */
static bool idle(void *userdata) {
        ProvisionerActivity a;
        provisioner_activity(((Fx *) userdata)->p, &a);
        return !a.batch_open && !a.round_running;
}

static bool learned(void *userdata) {
        ProvisionerActivity a;
        provisioner_activity(((Fx *) userdata)->p, &a);
        return a.learned;
}

/* The provisioner with the test's configuration changes (registration timeout), leading once
 * its watches have listed, and past a new leader's wait for the agents' reports. */
static void start(Fx *f, uint64_t registration_timeout_ms) {
        f->cfg.registration_timeout_ms = registration_timeout_ms;
        ProvisionerPorts ports = { .userdata = f, .acting = acting, .decided = on_decided, .launched = on_launched,
                                   .launch_failed = on_launch_failed };
        assert_int_equal(provisioner_new(f->event, &f->cfg, &f->registry, &ports, &f->p), 0);
        assert_true(world_run_until(watches_synced, f, 5000));
        provisioner_set_leading(f->p, true);
        assert_true(world_run_until(learned, f, 5000));
        run_for(1100);
        assert_true(world_run_until(idle, f, 5000)); /* the batch the learning opened is done with */
}

/* The NodePool "default": one capacity type, a CPU limit. */
static void put_nodepool(const char *capacity_type, const char *cpu_limit) {
        char json[512];
        snprintf(json, sizeof json,
                 "{\"metadata\":{\"name\":\"default\",\"uid\":\"np-1\"},\"spec\":{\"template\":{\"spec\":{"
                 "\"requirements\":[{\"key\":\"karpenter.sh/capacity-type\",\"operator\":\"In\",\"values\":[\"%s\"]}]}},"
                 "\"limits\":{\"cpu\":\"%s\"}}}",
                 capacity_type, cpu_limit);
        world_put(NODEPOOLS, json);
}

static void write_temp(char *path, size_t size, const char *text) {
        snprintf(path, size, "/tmp/test-provision-rounds-XXXXXX");
        int fd = mkstemp(path);
        assert_true(fd >= 0);
        assert_int_equal(write(fd, text, strlen(text)), (ssize_t) strlen(text));
        close(fd);
}

static int setup(void **state) {
        Fx *f = calloc(1, sizeof *f);
        assert_non_null(f);
        assert_int_equal(sd_event_new(&f->event), 0);
        world_init(f->event);
        memset(&ec2, 0, sizeof ec2);
        assert_int_equal(registry_init(&f->registry, 100), 0);
        write_temp(f->catalog, sizeof f->catalog, catalog_json);
        /* the agents' CA goes into the user data as it is */
        write_temp(f->agent_ca, sizeof f->agent_ca, "-----BEGIN CERTIFICATE-----\nMIIBunit\n-----END CERTIFICATE-----\n");
        /* every endpoint a closed local port: what slipped past the seams fails here */
        f->cfg = (ProvisionerConfig) {
                .cluster_name = "unit",
                .kube_server = "http://127.0.0.1:1",
                .region = "us-east-1",
                .ec2_endpoint = "http://127.0.0.1:1",
                .ssm_endpoint = "http://127.0.0.1:1",
                .iam_endpoint = "http://127.0.0.1:1",
                .catalog = f->catalog,
                .batch_idle_ms = 100,
                .batch_max_ms = 1000,
                .report_interval_ms = 1, /* a new leader waits 2 intervals + 1 s for reports */
                .stale_after_ms = 60000,
                .kubernetes_version = "1.31",
                .instance_profile = "nodes",
                .cluster_endpoint = "https://127.0.0.1:6443",
                .cluster_ca = "Y2E=",
                .cluster_cidr = "10.100.0.0/16",
                .agent_endpoint = "tls+tcp://127.0.0.1:7400",
                .agent_ca = f->agent_ca,
                .token = "bootstrap-token",
                .proxy_drains = { .report_interval_ms = 1000, .agent_silent_intervals = 3,
                                  .termination_grace_ms = 60000, .max_proxy_drains = 0 },
        };
        put_nodepool("on-demand", "100");
        log_set_max_level(getenv("TEST_LOG") ? LOG_DEBUG : LOG_ERR);
        *state = f;
        return 0;
}

/* No answer of EC2 or of the API is under way. */
static bool quiet(void *userdata) {
        return !ec2.answers && !world.calls;
}

static int teardown(void **state) {
        Fx *f = *state;
        (void) world_run_until(quiet, NULL, 2000); /* answers under way are delivered */
        while (ec2.answers) {
                answer_discard(ec2.answers);
                answer_free(ec2.answers);
        }
        provisioner_free(f->p);
        world_done();
        registry_done(&f->registry);
        unlink(f->catalog);
        unlink(f->agent_ca);
        sd_event_unref(f->event);
        assert_int_equal(ec2.unexpected, 0);
        free(f);
        return 0;
}

/* A pod requesting cpu (millicores): bound to node and not started yet, or (node NULL) one the
 * scheduler could not place. */
static void put_pod(const char *name, unsigned cpu_millis, const char *node) {
        char json[1024], bound[128];
        snprintf(bound, sizeof bound, "\"nodeName\":\"%s\",", strempty(node));
        snprintf(json, sizeof json,
                 "{\"metadata\":{\"name\":\"%s\",\"namespace\":\"default\",\"uid\":\"uid-%s\"},"
                 "\"spec\":{%s\"containers\":[{\"name\":\"c\",\"resources\":{\"requests\":{\"cpu\":\"%um\",\"memory\":\"512Mi\"}}}]},"
                 "\"status\":{\"phase\":\"Pending\",\"conditions\":[{\"type\":\"PodScheduled\",%s}]}}",
                 name, name, node ? bound : "", cpu_millis,
                 node ? "\"status\":\"True\"" : "\"status\":\"False\",\"reason\":\"Unschedulable\"");
        world_put(PODS, json);
}

static void put_pending_pod(const char *name, unsigned cpu_millis) {
        put_pod(name, cpu_millis, NULL);
}

typedef struct Until {
        Fx *f;
        size_t fleets, terminated;
        unsigned decided;
} Until;

static bool fleets_reach(void *userdata) {
        Until *u = userdata;
        return ec2.n_fleets >= u->fleets && quiet(NULL);
}

/* So many CreateFleet calls were made, answered or not. */
static bool fleets_sent(void *userdata) {
        return ec2.n_fleets >= ((Until *) userdata)->fleets;
}

static bool decided_reach(void *userdata) {
        Until *u = userdata;
        ProvisionerActivity a;
        provisioner_activity(u->f->p, &a);
        return u->f->decided >= u->decided && !a.round_running && quiet(NULL);
}

static bool terminated_reach(void *userdata) {
        Until *u = userdata;
        return ec2.n_terminated >= u->terminated && quiet(NULL);
}

static size_t in_flight(Fx *f) {
        size_t n = 0;
        (void) provisioner_inflight(f->p, &n);
        return n;
}

/* The value of one of its metrics (without labels). */
static unsigned long metric(Fx *f, const char *name) {
        return METRIC_VALUE(provisioner_metrics, f->p, name);
}

static const char *subnet_of(const char *zone) {
        return streq(zone, "us-east-1a") ? "subnet-a" : streq(zone, "us-east-1b") ? "subnet-b" : "?";
}

/* Every override of a fleet in a zone with a subnet, in that zone's subnet. */
static void assert_overrides_sound(const FleetCall *fc) {
        assert_true(fc->n >= 1);
        for (size_t i = 0; i < fc->n; i++)
                assert_string_equal(fc->subnet[i], subnet_of(fc->zone[i]));
}

/* ---- the tests ---------------------------------------------------------------------------- */

/* Pods that come within the idle window close into one batch; its round launches what the
 * solver planned, one CreateFleet per planned node. */
static void test_batch_round_launches_plan(void **state) {
        Fx *f = *state;
        f->cfg.batch_idle_ms = 400; /* far above the 40 ms between the pods, even on a loaded machine */
        start(f, 600000);
        put_pending_pod("web-1", 1200);
        run_for(40); /* within the batch's idle time */
        put_pending_pod("web-2", 1200);
        put_pending_pod("web-3", 1200);
        assert_true(world_run_until(decided_reach, &(Until) { .f = f, .decided = 1 }, 10000));

        assert_int_equal(f->decided, 1); /* one batch, one round */
        assert_int_equal(f->last_unschedulable, 0);
        assert_true(f->n_plan >= 1);
        size_t pods = 0;
        for (size_t i = 0; i < f->n_plan; i++)
                pods += f->plan[i].n_pods;
        assert_int_equal(pods, 3);
        /* 1.2 CPU each: no two on a 2-vCPU node; three t3.medium are the cheapest */
        assert_int_equal(f->n_plan, 3);
        for (size_t i = 0; i < 3; i++) {
                assert_string_equal(f->plan[i].type, "t3.medium");
                assert_int_equal(f->plan[i].capacity_type, SOLVER_CAPACITY_ON_DEMAND);
        }
        /* the three identical nodes are one CreateFleet of three instances, the plan's cheapest
         * offering first */
        assert_int_equal(ec2.n_fleets, 1);
        const FleetCall *fc = &ec2.fleets[0];
        assert_int_equal(fc->target, 3);
        assert_string_equal(fc->type[0], f->plan[0].type);
        assert_string_equal(fc->zone[0], f->plan[0].zone);
        assert_int_equal(fc->capacity_type, EC2_CAPACITY_ON_DEMAND);
        assert_string_equal(fc->nodepool, "default");
        assert_overrides_sound(fc);
        assert_true(strncmp(fc->token, "nodesmith-", 10) == 0);
        assert_int_equal(f->launched, 3);
        assert_int_equal(in_flight(f), 3);
        assert_int_equal(metric(f, "nodesmith_instances_launched_total"), 3);
        assert_int_equal(ec2.templates, 1); /* one launch template serves them all */
        /* the pods are told where they go */
        assert_int_equal(world_count("EVENT Pod/web-"), 3);
}

/* Pods that keep coming never let the batch go idle: it closes at its maximum all the same, and
 * what came later goes to the next round. */
static void test_batch_closes_at_its_maximum(void **state) {
        Fx *f = *state;
        f->cfg.batch_idle_ms = 600;
        f->cfg.batch_max_ms = 1000;
        start(f, 600000);
        char name[32];
        unsigned first_round_at = 0;
        for (unsigned i = 0; i < 16; i++) {
                snprintf(name, sizeof name, "stream-%u", i);
                put_pending_pod(name, 50);
                run_for(100); /* under the idle time */
                if (f->decided == 1 && first_round_at == 0)
                        first_round_at = i + 1;
        }
        /* the first round came about 1 s after the first pod, while pods still came */
        assert_true(first_round_at >= 2 && first_round_at < 16);
        assert_true(world_run_until(decided_reach, &(Until) { .f = f, .decided = 2 }, 10000));
}

/* A pending pod written again and again (kube-scheduler's retries rewrite its status) does not
 * hold the batch open: only new pending pods extend the idle window. */
static void test_rewritten_pod_does_not_hold_batch(void **state) {
        Fx *f = *state;
        f->cfg.batch_idle_ms = 300;
        f->cfg.batch_max_ms = 10000;
        start(f, 600000);
        put_pending_pod("rewritten-1", 500);
        unsigned decided_at = 0;
        for (unsigned i = 1; i <= 30 && !decided_at; i++) {
                run_for(100); /* under the idle time */
                put_pending_pod("rewritten-1", 500); /* the same pod, a new resourceVersion */
                if (f->decided >= 1)
                        decided_at = i;
        }
        /* the round came about 0.3 s after the pod, not 0.3 s after the last rewrite (3 s on) */
        assert_true(decided_at >= 1 && decided_at < 25);
        assert_int_equal(f->decided, 1);
}

/* A leader whose Lease renewal is late launches nothing. The election then steps it down at its
 * renew deadline (docs/leader-election.md); leading again, it learns EC2's instances first and
 * then launches for the pods still waiting, with no other event. */
static void test_nothing_launched_while_not_acting(void **state) {
        Fx *f = *state;
        start(f, 600000);
        f->not_acting = true;
        put_pending_pod("lease-1", 500);
        run_for(1500);
        assert_int_equal(ec2.n_fleets, 0);
        assert_int_equal(f->launched, 0);
        provisioner_set_leading(f->p, false);
        f->not_acting = false;
        provisioner_set_leading(f->p, true);
        assert_true(world_run_until(fleets_reach, &(Until) { .fleets = 1 }, 8000));
        assert_int_equal(in_flight(f), 1);
}

/* A pod the scheduler places after all before the batch closes (it leaves the watch of unbound
 * pods) gets no capacity; one that no longer asks for it (PodScheduled no longer
 * Unschedulable) neither. */
static void test_pods_placed_meanwhile_get_nothing(void **state) {
        Fx *f = *state;
        f->cfg.batch_idle_ms = 400;
        start(f, 600000);
        ProvisionerActivity a;
        provisioner_activity(f->p, &a);
        uint64_t rounds = a.rounds;
        put_pending_pod("late-1", 500);
        put_pending_pod("late-2", 500);
        world_put(PODS, "{\"metadata\":{\"name\":\"late-1\",\"namespace\":\"default\",\"uid\":\"uid-late-1\"},"
                        "\"spec\":{\"nodeName\":\"ip-10-0-9-9\",\"containers\":[{\"name\":\"c\"}]},"
                        "\"status\":{\"phase\":\"Pending\"}}");
        world_put(PODS, "{\"metadata\":{\"name\":\"late-2\",\"namespace\":\"default\",\"uid\":\"uid-late-2\"},"
                        "\"spec\":{\"containers\":[{\"name\":\"c\"}]},"
                        "\"status\":{\"phase\":\"Pending\",\"conditions\":[{\"type\":\"PodScheduled\",\"status\":\"True\"}]}}");
        run_for(1500);
        assert_int_equal(ec2.n_fleets, 0);
        assert_int_equal(f->decided, 0); /* a round with nothing pending decides nothing */
        provisioner_activity(f->p, &a);
        assert_true(a.rounds > rounds); /* the batch the pods opened closed into a round all the same */
}

/* A CreateFleet throttled past the client's retries launches nothing: the same plan is tried
 * again, with the same ClientToken, so that EC2's idempotency never doubles capacity. */
static void test_throttled_launch_retried_with_same_token(void **state) {
        Fx *f = *state;
        ec2.script[ec2.n_script++] = FLEET_THROTTLED;
        start(f, 600000);
        put_pending_pod("api-1", 500);
        assert_true(world_run_until(fleets_reach, &(Until) { .fleets = 2 }, 10000));
        assert_int_equal(f->launch_failed, 1);
        assert_string_equal(ec2.fleets[1].token, ec2.fleets[0].token);
        assert_string_equal(ec2.fleets[1].type[0], ec2.fleets[0].type[0]);
        assert_string_equal(ec2.fleets[1].zone[0], ec2.fleets[0].zone[0]);
        assert_true(world_run_until(decided_reach, &(Until) { .f = f, .decided = 2 }, 5000));
        assert_int_equal(in_flight(f), 1);
        assert_int_equal(metric(f, "nodesmith_launch_errors_total"), 1);
        assert_int_equal(metric(f, "nodesmith_insufficient_capacity_total"), 0);
}

/* Insufficient capacity for the first offering: that offering is out, and the next round's
 * CreateFleet launches elsewhere, under a new ClientToken (it is another plan). */
static void test_insufficient_capacity_next_round_elsewhere(void **state) {
        Fx *f = *state;
        ec2.script[ec2.n_script++] = FLEET_ICE_FIRST;
        start(f, 600000);
        put_pending_pod("api-1", 500);
        assert_true(world_run_until(fleets_reach, &(Until) { .fleets = 2 }, 10000));
        const FleetCall *first = &ec2.fleets[0], *second = &ec2.fleets[1];
        assert_true(!streq(second->type[0], first->type[0]) || !streq(second->zone[0], first->zone[0]));
        for (size_t i = 0; i < second->n; i++)
                assert_false(streq(second->type[i], first->type[0]) && streq(second->zone[i], first->zone[0]));
        /* the other offerings of the first call are still offered */
        assert_int_equal(second->n, first->n - 1);
        assert_string_not_equal(second->token, first->token);
        assert_overrides_sound(second);
        assert_true(world_run_until(decided_reach, &(Until) { .f = f, .decided = 2 }, 5000));
        assert_int_equal(metric(f, "nodesmith_insufficient_capacity_total"), 1);
        assert_int_equal(in_flight(f), 1);
        size_t n;
        const InFlight *fl = provisioner_inflight(f->p, &n);
        assert_string_equal(fl[0].instance_type, second->type[0]);
        assert_string_equal(fl[0].zone, second->zone[0]);

        /* a call failing for capacity as a whole takes out every offering it named: the pod
         * waits, nothing of it is asked for again */
        ec2.script[ec2.n_script++] = FLEET_ICE;
        unsigned rounds = f->decided;
        put_pending_pod("api-2", 1500);
        assert_true(world_run_until(decided_reach, &(Until) { .f = f, .decided = rounds + 2 }, 10000));
        assert_int_equal(ec2.n_fleets, 3);
        assert_int_equal(f->last_unschedulable, 1);
        assert_int_equal(f->n_plan, 0);
        assert_int_equal(metric(f, "nodesmith_insufficient_capacity_total"), 1 + ec2.fleets[2].n);
}

/* A partial fleet: the first override had no capacity, EC2 launched the second. The instance is
 * in flight as EC2 gave it, the failed offering is out for the next launch. */
static void test_partial_fleet(void **state) {
        Fx *f = *state;
        ec2.script[ec2.n_script++] = FLEET_PARTIAL;
        start(f, 600000);
        put_pending_pod("batch-1", 500);
        assert_true(world_run_until(decided_reach, &(Until) { .f = f, .decided = 1 }, 10000));
        assert_int_equal(ec2.n_fleets, 1);
        const FleetCall *fc = &ec2.fleets[0];
        size_t n;
        const InFlight *fl = provisioner_inflight(f->p, &n);
        assert_int_equal(n, 1);
        assert_string_equal(fl[0].instance_type, fc->type[1]);
        assert_string_equal(fl[0].zone, fc->zone[1]);
        assert_int_equal(metric(f, "nodesmith_insufficient_capacity_total"), 1);
        assert_int_equal(metric(f, "nodesmith_launch_errors_total"), 0);

        put_pending_pod("batch-2", 1900); /* does not fit beside batch-1: a new node */
        assert_true(world_run_until(fleets_reach, &(Until) { .fleets = 2 }, 10000));
        const FleetCall *next = &ec2.fleets[1];
        for (size_t i = 0; i < next->n; i++)
                assert_false(streq(next->type[i], fc->type[0]) && streq(next->zone[i], fc->zone[0]));
}

/* Identical nodes go out as one CreateFleet. Throttled, it is sent again alike (same count, same
 * ClientToken: EC2's idempotency never doubles them); EC2 then launches one instance fewer than
 * asked (the offering ran out): the instances it gave are in flight with their pods, the pod of
 * the node left without one is planned again at once, elsewhere, under a new ClientToken. */
static void test_batched_fleet_partly_fulfilled(void **state) {
        Fx *f = *state;
        f->cfg.batch_idle_ms = 400;
        ec2.script[ec2.n_script++] = FLEET_THROTTLED;
        ec2.script[ec2.n_script++] = FLEET_SHORT;
        start(f, 600000);
        put_pending_pod("job-1", 1200);
        put_pending_pod("job-2", 1200);
        put_pending_pod("job-3", 1200);
        assert_true(world_run_until(fleets_reach, &(Until) { .fleets = 2 }, 10000));
        const FleetCall *first = &ec2.fleets[0], *again = &ec2.fleets[1];
        assert_int_equal(first->target, 3);
        assert_int_equal(again->target, 3);
        assert_string_equal(again->token, first->token);
        assert_string_equal(again->type[0], first->type[0]);
        assert_string_equal(again->zone[0], first->zone[0]);

        /* two of three: both in flight, the third launch failed and its pod is planned again */
        assert_true(world_run_until(fleets_reach, &(Until) { .fleets = 3 }, 10000));
        const FleetCall *rest = &ec2.fleets[2];
        assert_int_equal(rest->target, 1);
        assert_string_not_equal(rest->token, first->token);
        for (size_t i = 0; i < rest->n; i++)
                assert_false(streq(rest->type[i], first->type[0]) && streq(rest->zone[i], first->zone[0]));
        assert_overrides_sound(rest);
        assert_true(world_run_until(decided_reach, &(Until) { .f = f, .decided = 3 }, 5000));
        assert_int_equal(f->n_plan, 1);
        assert_int_equal(f->plan[0].n_pods, 1);
        assert_true(world_run_until(idle, f, 5000));
        /* three instances for three pods, each pod nominated once */
        assert_int_equal(in_flight(f), 3);
        assert_int_equal(f->launched, 3);
        assert_int_equal(f->launch_failed, 3 + 1); /* the throttled call's three, the one left short */
        assert_int_equal(world_count("EVENT Pod/job-"), 3);
        assert_int_equal(metric(f, "nodesmith_instances_launched_total"), 3);
        assert_int_equal(metric(f, "nodesmith_insufficient_capacity_total"), 1);
        size_t n;
        const InFlight *fl = provisioner_inflight(f->p, &n);
        assert_int_equal(n, 3);
        assert_string_equal(fl[0].instance_type, first->type[0]);
        assert_string_equal(fl[1].instance_type, first->type[0]);
        assert_string_equal(fl[2].instance_type, rest->type[0]);
        assert_string_equal(fl[2].zone, rest->zone[0]);
        /* nothing more: no pod is left pending without its node */
        run_for(1500);
        assert_int_equal(ec2.n_fleets, 3);
}

/* A spot instance in flight that EC2 takes back before it registers: its pods are planned again
 * at once, away from that spot offering. */
static void test_spot_in_flight_taken_back(void **state) {
        Fx *f = *state;
        put_nodepool("spot", "100");
        start(f, 600000);
        put_pending_pod("spot-1", 500);
        assert_true(world_run_until(fleets_reach, &(Until) { .fleets = 1 }, 10000));
        assert_int_equal(ec2.fleets[0].capacity_type, EC2_CAPACITY_SPOT);
        size_t n;
        const InFlight *fl = provisioner_inflight(f->p, &n);
        assert_int_equal(n, 1);
        char id[32], type[32], zone[32];
        snprintf(id, sizeof id, "%s", fl[0].instance_id);
        snprintf(type, sizeof type, "%s", fl[0].instance_type);
        snprintf(zone, sizeof zone, "%s", fl[0].zone);

        assert_false(provisioner_instance_leaving(f->p, "i-0ffffffffffffffff"));
        assert_true(provisioner_instance_leaving(f->p, id));
        assert_int_equal(in_flight(f), 0);
        assert_true(world_run_until(fleets_reach, &(Until) { .fleets = 2 }, 10000));
        const FleetCall *next = &ec2.fleets[1];
        assert_int_equal(next->capacity_type, EC2_CAPACITY_SPOT);
        for (size_t i = 0; i < next->n; i++)
                assert_false(streq(next->type[i], type) && streq(next->zone[i], zone));
        assert_string_not_equal(next->token, ec2.fleets[0].token);
        assert_int_equal(metric(f, "nodesmith_insufficient_capacity_total"), 1);
}

/* Instances in flight count against the NodePool's limits, and the pods they were launched for
 * are not planned again while the instance registers. */
static void test_in_flight_counts_against_limits(void **state) {
        Fx *f = *state;
        put_nodepool("on-demand", "2");
        start(f, 600000);
        put_pending_pod("job-1", 1200);
        assert_true(world_run_until(decided_reach, &(Until) { .f = f, .decided = 1 }, 10000));
        assert_int_equal(ec2.n_fleets, 1);
        assert_string_equal(ec2.fleets[0].type[0], "t3.medium");
        assert_int_equal(in_flight(f), 1);

        /* job-1 is still pending (its node is on the way); job-2 needs another 2-vCPU node, which
         * the limit of 2 CPU no longer allows */
        put_pending_pod("job-2", 1200);
        assert_true(world_run_until(decided_reach, &(Until) { .f = f, .decided = 2 }, 10000));
        assert_int_equal(ec2.n_fleets, 1);
        assert_int_equal(f->n_plan, 0);
        assert_int_equal(f->last_unschedulable, 1);
        assert_int_equal(in_flight(f), 1);

        /* a later batch for job-1 alone launches nothing either */
        put_pending_pod("job-1", 1200);
        assert_true(world_run_until(decided_reach, &(Until) { .f = f, .decided = 3 }, 10000));
        assert_int_equal(ec2.n_fleets, 1);
}

/* A Node of instance id, Ready, as its kubelet registers it. */
static void put_ready_node(const char *name, const char *zone, const char *id) {
        char json[1024];
        snprintf(json, sizeof json,
                 "{\"metadata\":{\"name\":\"%s\",\"labels\":{\"nodesmith.io/nodepool\":\"default\"}},"
                 "\"spec\":{\"providerID\":\"aws:///%s/%s\"},"
                 "\"status\":{\"allocatable\":{\"cpu\":\"1930m\",\"memory\":\"3Gi\",\"pods\":\"17\"},"
                 "\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\"}]}}",
                 name, zone, id);
        world_put(NODES, json);
}

/* Of two instances launched, the one whose Node registers (Ready, its agent reporting) is no
 * longer in flight; the other is terminated after the registration timeout, and its pod gets
 * capacity again. */
static void test_unregistered_instance_terminated(void **state) {
        Fx *f = *state;
        start(f, 1500);
        put_pending_pod("slow-1", 1200);
        put_pending_pod("slow-2", 1200);
        assert_true(world_run_until(fleets_reach, &(Until) { .fleets = 1 }, 10000));
        assert_true(world_run_until(idle, f, 5000));
        assert_int_equal(in_flight(f), 2);
        size_t fleets = ec2.n_fleets; /* one of two instances, or two of one (the pods came apart) */
        size_t n;
        const InFlight *fl = provisioner_inflight(f->p, &n);
        char registers[32], never[32];
        snprintf(registers, sizeof registers, "%s", fl[0].instance_id);
        snprintf(never, sizeof never, "%s", fl[1].instance_id);
        uint64_t now = 0;
        assert_true(sd_event_now(f->event, CLOCK_MONOTONIC, &now) >= 0);
        (void) agent_report_put(&f->registry, registers, "ip-10-0-1-1", false, now);
        put_ready_node("ip-10-0-1-1", fl[0].zone, registers);
        assert_int_equal(in_flight(f), 1);

        assert_true(world_run_until(terminated_reach, &(Until) { .terminated = 1 }, 10000));
        assert_int_equal(ec2.n_terminated, 1);
        assert_string_equal(ec2.terminated[0], never);
        assert_int_equal(metric(f, "nodesmith_instances_terminated_unregistered_total"), 1);
        /* its pod is planned again: a new launch, a new ClientToken */
        assert_true(world_run_until(fleets_reach, &(Until) { .fleets = fleets + 1 }, 10000));
        for (size_t i = 0; i < fleets; i++)
                assert_string_not_equal(ec2.fleets[fleets].token, ec2.fleets[i].token);
        assert_int_equal(ec2.fleets[fleets].target, 1);
        fl = provisioner_inflight(f->p, &n);
        assert_int_equal(n, 1);
        assert_string_not_equal(fl[0].instance_id, never);
        assert_string_not_equal(fl[0].instance_id, registers);
}

/* A pod bound to a Node whose agent has not reported it yet takes its room there: the pending pod
 * that would have fitted beside it gets a new node (before, the round planned it into that room
 * and launched nothing, and kube-scheduler found no place for it). */
static void test_bound_pod_counted_before_its_agent_reports_it(void **state) {
        Fx *f = *state;
        put_ready_node("ip-10-0-1-1", "us-east-1a", "i-0ccccccccccccccccc");
        uint64_t now = 0;
        assert_true(sd_event_now(f->event, CLOCK_MONOTONIC, &now) >= 0);
        (void) agent_report_put(&f->registry, "i-0ccccccccccccccccc", "ip-10-0-1-1", false, now);
        start(f, 600000);
        put_pod("bound-1", 1500, "ip-10-0-1-1");
        put_pending_pod("next-1", 1000);
        assert_true(world_run_until(decided_reach, &(Until) { .f = f, .decided = 1 }, 10000));
        assert_int_equal(ec2.n_fleets, 1);
        assert_int_equal(f->n_plan, 1);
        assert_int_equal(f->plan[0].n_pods, 1);
}

/* Once the agent reports the pod, it is counted once: from the report (the pod is still in the
 * watch of bound pods not started); a pending pod that fits beside it goes there. */
static void test_reported_bound_pod_counted_once(void **state) {
        Fx *f = *state;
        put_ready_node("ip-10-0-1-1", "us-east-1a", "i-0ccccccccccccccccc");
        uint64_t now = 0;
        assert_true(sd_event_now(f->event, CLOCK_MONOTONIC, &now) >= 0);
        (void) agent_report_put_pods(&f->registry, "i-0ccccccccccccccccc", "ip-10-0-1-1", false,
                                     &(AgentReportPod) { "uid-bound-1", "bound-1", 1000 }, 1, now);
        start(f, 600000);
        put_pod("bound-1", 1000, "ip-10-0-1-1");
        put_pending_pod("next-1", 800);
        assert_true(world_run_until(decided_reach, &(Until) { .f = f, .decided = 1 }, 10000));
        assert_int_equal(ec2.n_fleets, 0);
        assert_int_equal(f->n_plan, 0);
        assert_int_equal(f->last_unschedulable, 0);
        /* a second pod of the same size does not fit beside them: it gets a node */
        put_pending_pod("next-2", 800);
        assert_true(world_run_until(decided_reach, &(Until) { .f = f, .decided = 2 }, 10000));
        assert_int_equal(ec2.n_fleets, 1);
}

/* A round whose CreateFleet is not answered yet does not hold the next one back: a pod that
 * comes meanwhile gets its own round and node at once, and the pod of the unanswered launch
 * counts as on it (it is not planned again: were it free, the larger new pod would take the
 * launching node's room and the launch would be for it). Once answered, both instances are in
 * flight. */
static void test_next_round_while_fleet_unanswered(void **state) {
        Fx *f = *state;
        start(f, 600000);
        ec2.hold_fleets = true;
        put_pending_pod("first-1", 1200);
        assert_true(world_run_until(fleets_sent, &(Until) { .fleets = 1 }, 10000));
        put_pending_pod("second-1", 1500);
        assert_true(world_run_until(fleets_sent, &(Until) { .fleets = 2 }, 10000));
        assert_int_equal(f->decided, 2);
        assert_int_equal(f->n_plan, 1); /* second-1 alone */
        assert_int_equal(f->plan[0].n_pods, 1);
        assert_string_equal(f->plan[0].first_pod, "second-1");
        assert_int_equal(ec2.fleets[1].target, 1);
        assert_true(provisioner_launch_unanswered(f->p));
        fleets_release();
        assert_true(world_run_until(decided_reach, &(Until) { .f = f, .decided = 2 }, 10000));
        assert_int_equal(in_flight(f), 2);
        assert_false(provisioner_launch_unanswered(f->p));
        run_for(1500); /* nothing more: both pods have their node */
        assert_int_equal(ec2.n_fleets, 2);
}

/* A node told to drain whose agent reports it drained is terminated (only that one), and once
 * EC2 took the instance its Node loses the termination finalizer through a guarded JSON patch. */
static void test_drained_node_terminated_and_finalizer_removed(void **state) {
        Fx *f = *state;
        world_put(NODES, "{\"metadata\":{\"name\":\"ip-10-0-0-1\",\"finalizers\":[\"example.com/keep\",\"nodesmith.io/termination\"]},"
                         "\"spec\":{\"providerID\":\"aws:///us-east-1a/i-0aaaaaaaaaaaaaaaa\"},"
                         "\"status\":{\"allocatable\":{\"cpu\":\"2\",\"memory\":\"4Gi\",\"pods\":\"17\"},"
                         "\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\"}]}}");
        world_put(NODES, "{\"metadata\":{\"name\":\"ip-10-0-0-2\",\"finalizers\":[\"nodesmith.io/termination\"]},"
                         "\"spec\":{\"providerID\":\"aws:///us-east-1a/i-0bbbbbbbbbbbbbbbb\"},"
                         "\"status\":{\"allocatable\":{\"cpu\":\"2\",\"memory\":\"4Gi\",\"pods\":\"17\"},"
                         "\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\"}]}}");
        uint64_t now = 0;
        assert_true(sd_event_now(f->event, CLOCK_MONOTONIC, &now) >= 0);
        NodeEntry *e = agent_report_put(&f->registry, "i-0aaaaaaaaaaaaaaaa", "ip-10-0-0-1", true, now);
        e->action = NODESMITH__V1__NODE_DIRECTIVE__ACTION__ACTION_DRAIN;
        (void) agent_report_put(&f->registry, "i-0bbbbbbbbbbbbbbbb", "ip-10-0-0-2", false, now);
        start(f, 600000);
        assert_true(world_run_until(terminated_reach, &(Until) { .terminated = 1 }, 10000));
        assert_int_equal(ec2.n_terminated, 1);
        assert_string_equal(ec2.terminated[0], "i-0aaaaaaaaaaaaaaaa");

        const char *patch = world_find("PATCH /api/v1/nodes/ip-10-0-0-1 ");
        assert_non_null(patch);
        assert_non_null(strstr(patch, "\"op\":\"test\""));
        assert_non_null(strstr(patch, "\"op\":\"remove\""));
        const cJSON *fin = cJSON_GetObjectItem(cJSON_GetObjectItem(world_get(NODES, NULL, "ip-10-0-0-1"), "metadata"),
                                               "finalizers");
        assert_int_equal(cJSON_GetArraySize(fin), 1);
        assert_string_equal(cJSON_GetArrayItem(fin, 0)->valuestring, "example.com/keep");
        assert_true(registry_is_buried(&f->registry, "i-0aaaaaaaaaaaaaaaa"));
        assert_int_equal(metric(f, "nodesmith_instances_terminated_total"), 1);
        /* the other node is neither terminated nor touched */
        assert_int_equal(world_count("PATCH /api/v1/nodes/ip-10-0-0-2 "), 0);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_batch_round_launches_plan, setup, teardown),
                cmocka_unit_test_setup_teardown(test_batch_closes_at_its_maximum, setup, teardown),
                cmocka_unit_test_setup_teardown(test_rewritten_pod_does_not_hold_batch, setup, teardown),
                cmocka_unit_test_setup_teardown(test_nothing_launched_while_not_acting, setup, teardown),
                cmocka_unit_test_setup_teardown(test_pods_placed_meanwhile_get_nothing, setup, teardown),
                cmocka_unit_test_setup_teardown(test_throttled_launch_retried_with_same_token, setup, teardown),
                cmocka_unit_test_setup_teardown(test_insufficient_capacity_next_round_elsewhere, setup, teardown),
                cmocka_unit_test_setup_teardown(test_partial_fleet, setup, teardown),
                cmocka_unit_test_setup_teardown(test_batched_fleet_partly_fulfilled, setup, teardown),
                cmocka_unit_test_setup_teardown(test_spot_in_flight_taken_back, setup, teardown),
                cmocka_unit_test_setup_teardown(test_in_flight_counts_against_limits, setup, teardown),
                cmocka_unit_test_setup_teardown(test_unregistered_instance_terminated, setup, teardown),
                cmocka_unit_test_setup_teardown(test_drained_node_terminated_and_finalizer_removed, setup, teardown),
                cmocka_unit_test_setup_teardown(test_bound_pod_counted_before_its_agent_reports_it, setup, teardown),
                cmocka_unit_test_setup_teardown(test_reported_bound_pod_counted_once, setup, teardown),
                cmocka_unit_test_setup_teardown(test_next_round_while_fleet_unanswered, setup, teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
