/* SPDX-License-Identifier: Apache-2.0 */
/* The agents' side of the link: one report in (authenticated, bound to its instance), one
 * directive out. */
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "macro.h"
#include "nodebind.h"
#include "pbarena.h"
#include "server.h"
#include "wire.h"

struct AgentServer {
        AgentServerConfig cfg;
        Registry *registry;
        Attestor *attest;              /* NULL when attestation is off */
        FastPath *fast;                /* NULL: every report on the loop */
        AgentServerPorts ports;
        PbArena *scratch;              /* for report envelopes, reset per report */
        AgentMetrics metrics;
        uint64_t auth_log_usec[_REPORT_RESULT_MAX];   /* rate limit for refusal logs, per result */
        uint64_t auth_suppressed[_REPORT_RESULT_MAX];
};

int agent_server_new(const AgentServerConfig *cfg, Registry *registry, Attestor *attest, FastPath *fast,
                     const AgentServerPorts *ports, AgentServer **ret) {
        AgentServer *s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        *s = (AgentServer) { .cfg = *cfg, .registry = registry, .attest = attest, .fast = fast, .ports = *ports };
        s->scratch = pb_arena_new(64 * 1024);
        if (!s->scratch) {
                free(s);
                return -ENOMEM;
        }
        *ret = s;
        return 0;
}

AgentServer *agent_server_free(AgentServer *s) {
        if (!s)
                return NULL;
        pb_arena_free(s->scratch);
        free(s);
        return NULL;
}

const AgentMetrics *agent_server_metrics(const AgentServer *s) {
        return &s->metrics;
}

static uint64_t server_now(const AgentServer *s) {
        return s->ports.now(s->ports.userdata);
}

static const char *const result_names[_REPORT_RESULT_MAX] = {
        [REPORT_OK] = "ok",
        [REPORT_DUPLICATE] = "duplicate",
        [REPORT_INVALID] = "invalid",
        [REPORT_UNAUTHENTICATED] = "unauthenticated",
        [REPORT_VERSION_MISMATCH] = "version_mismatch",
        [REPORT_OVERLOADED] = "overloaded",
        [REPORT_PENDING] = "pending",
        [REPORT_NODE_MISMATCH] = "node_mismatch",
};

const char *report_result_to_string(ReportResult r) {
        return r >= 0 && r < _REPORT_RESULT_MAX ? result_names[r] : "unknown";
}

const char *notice_kind_to_string(int kind) {
        static const char *const names[NOTICE_KINDS] = {
                "unspecified", "spot_interruption", "rebalance", "maintenance", "shutdown", "node_deleted",
        };
        return kind >= 0 && kind < NOTICE_KINDS ? names[kind] : "unknown";
}

static int64_t now_unix_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The agent's sequence starts at its wall clock in microseconds and grows by one per report: a
 * sequence more than a day ahead of ours is forged (it would make every later report of the boot
 * a duplicate). */
static uint64_t implausible_sequence(void) {
        return (uint64_t) (now_unix_ms() + 24LL * 3600 * 1000) * 1000;
}

/* A refused agent is logged, but at most once every 10 s per kind of refusal with a count of what
 * was suppressed, so a misconfigured fleet cannot flood the journal, and a flood of one kind (a
 * wrong token) does not hide another (a report naming another node's Node). */
static void log_refusal(AgentServer *c, ReportResult res, const char *what, const char *instance) {
        uint64_t now = server_now(c);
        if (c->auth_log_usec[res] && now - c->auth_log_usec[res] < 10 * USEC_PER_SEC) {
                c->auth_suppressed[res]++;
                return;
        }
        log_warning("Refused report from %s: %s%s", isempty(instance) ? "unidentified agent" : instance,
                    what, c->auth_suppressed[res] ? " (and earlier refusals not logged)" : "");
        c->auth_log_usec[res] = now;
        c->auth_suppressed[res] = 0;
}

void agent_server_notice_changed(const NodeEntry *e, const NoticeRecord *n, bool added, void *userdata) {
        AgentServer *c = userdata;
        int k = n->kind >= 0 && n->kind < NOTICE_KINDS ? n->kind : 0;
        if (added) {
                c->metrics.notices_total[k]++;
                int64_t left = n->deadline_unix_ms > 0 ? n->deadline_unix_ms - n->recorded_unix_ms : 0;
                if (n->deadline_unix_ms > 0)
                        log_notice("Node %s: %s notice %s, deadline in %.1fs.", e->instance_id,
                                   notice_kind_to_string(k), n->event_id, (double) left / 1000.0);
                else
                        log_notice("Node %s: %s notice %s.", e->instance_id, notice_kind_to_string(k),
                                   n->event_id);
                if (c->ports.notice_event)
                        c->ports.notice_event(c->ports.userdata, e, notice_kind_to_string(k), n->event_id, left, true);
        } else {
                c->metrics.notices_withdrawn_total[k]++;
                log_notice("Node %s: %s notice %s withdrawn.", e->instance_id,
                           notice_kind_to_string(k), n->event_id);
                if (c->ports.notice_event)
                        c->ports.notice_event(c->ports.userdata, e, notice_kind_to_string(k), n->event_id, 0, false);
        }
}

void agent_server_apply_notices(AgentServer *c, NodeEntry *e) {
        if (!directive_from_notices(e, c->cfg.drain_on))
                return;
        registry_directive_changed(c->registry, e);
        if (e->action == NODESMITH__V1__NODE_DIRECTIVE__ACTION__ACTION_DRAIN) {
                log_notice("Node %s: drain (%s), deadline %lld.", e->instance_id, e->reason,
                           (long long) e->deadline_unix_ms);
                /* replacement capacity now, before the drain ends */
                if (c->ports.node_leaving)
                        c->ports.node_leaving(c->ports.userdata, e);
        } else
                log_notice("Node %s: drain withdrawn, notices gone.", e->instance_id);
        if (c->ports.drain_event)
                c->ports.drain_event(c->ports.userdata, e, e->action == NODESMITH__V1__NODE_DIRECTIVE__ACTION__ACTION_DRAIN);
}

static bool state_valid(const AgentServer *c, const Nodesmith__V1__AgentReport *env,
                        const Nodesmith__V1__NodeState *st, const char **why) {
        if (!st->identity || !streq(strempty(st->identity->instance_id), env->instance_id)) {
                *why = "state names another instance than the report";
                return false;
        }
        if (!streq(strempty(st->identity->boot_id), strempty(env->boot_id))) {
                *why = "state names another boot than the report";
                return false;
        }
        if (!st->capacity || !st->allocatable) {
                *why = "report carries no capacity";
                return false;
        }
        if (st->n_pods > c->cfg.max_pods_per_node) {
                *why = "too many pods in one report";
                return false;
        }
        if (st->n_notices > c->cfg.max_notices_per_node) {
                *why = "too many notices in one report";
                return false;
        }
        if (st->allocatable->cpu_millis < 0 || st->allocatable->memory_bytes < 0 ||
            st->allocatable->pods < 0 || st->capacity->cpu_millis < 0) {
                *why = "negative resources";
                return false;
        }
        return true;
}

/* The state, unpacked into an arena of its own that the node keeps until its next change: sized
 * exactly, from a first unpack into the report's scratch arena (a guess of a few times the packed
 * length left a third of it unused, for every node; only changed states get here). */
static Nodesmith__V1__NodeState *state_unpack(AgentServer *c, const Nodesmith__V1__AgentReport *env, PbArena **arena) {
        size_t before = pb_arena_used(c->scratch), need;
        Nodesmith__V1__NodeState *probe =
                nodesmith__v1__node_state__unpack(pb_arena_allocator(c->scratch), env->state.len, env->state.data);
        if (!probe) {
                *arena = NULL;
                return NULL;
        }
        need = pb_arena_used(c->scratch) - before;
        *arena = pb_arena_new(need);
        return *arena ? nodesmith__v1__node_state__unpack(pb_arena_allocator(*arena), env->state.len,
                                                          env->state.data)
                      : NULL;
}

/* Attestation of the reporting agent boot (attest.h). The registry holds the boot of each
 * instance's agent: while that agent is alive (and not shutting down), its reports are bound
 * already, and another boot claiming the instance is a replay. Otherwise the state is unpacked
 * (into *arena, for the caller to reuse) and its identity document checked. */
static AttestVerdict attest_report(AgentServer *c, const Nodesmith__V1__AgentReport *env,
                                   const NodeEntry *e, PbArena **arena, Nodesmith__V1__NodeState **st,
                                   AttestReason *ret_reason) {
        uint64_t now = server_now(c);
        const char *bound = NULL;

        *ret_reason = ATTEST_REASON_NONE;
        if (e && e->state && e->state->identity && !e->state->shutting_down &&
            now - e->last_seen_usec < c->cfg.stale_after_ms * USEC_PER_MSEC)
                bound = e->state->identity->boot_id;
        if (bound && streq(bound, strempty(env->boot_id)) &&
            (attestor_mode(c->attest) == ATTEST_REQUIRED ||
             attestor_accepted(c->attest, env->instance_id, env->boot_id)))
                return ATTEST_ACCEPT;
        if (!*st)
                *st = state_unpack(c, env, arena);
        return attestor_check(c->attest, env->instance_id, env->boot_id, bound,
                              *st ? (*st)->identity : NULL, now, ret_reason);
}

/* A large report's scratch memory is given back after it. */
#define SCRATCH_KEEP (256 * 1024)

static bool entry_alive(const AgentServer *c, const NodeEntry *e) {
        return e && e->state && e->state->identity && !e->state->shutting_down && e->reports > 0 &&
               server_now(c) - e->last_seen_usec < c->cfg.stale_after_ms * USEC_PER_MSEC;
}

/* A boot that was issued a secret must present it while its agent is alive; while it is, another
 * boot may not take the instance over. Once the agent has been silent for stale-after, or says it
 * shuts down, a new boot (a reboot) or the same one without its secret (an agent that lost it) is
 * accepted again (attested, if attestation is on) and issued a new secret.
 * < 0: refuse; SECRET_KEEP: the boot's secret holds (presented, or not yet confirmed and sent
 * again); SECRET_NEW: a new one is issued if the report is accepted. */
enum { SECRET_KEEP, SECRET_NEW };

static int boot_secret_check(const AgentServer *c, const NodeEntry *e, const char *boot_id, WireSpan given,
                             const char **ret_why) {
        bool same_boot = e && e->secret_boot && streq(e->secret_boot, strempty(boot_id));
        bool presented = same_boot && given.len == sizeof e->boot_secret &&
                         CRYPTO_memcmp(given.data, e->boot_secret, sizeof e->boot_secret) == 0;
        if (presented || (same_boot && given.len == 0 && !e->secret_confirmed))
                return SECRET_KEEP; /* (the reply that carried it may have been lost) */
        if (!e || !e->secret_boot || !entry_alive(c, e))
                return SECRET_NEW;
        *ret_why = same_boot ? "boot secret missing or wrong" : "another agent boot holds this instance";
        return -EPERM;
}

static int boot_secret_issue(NodeEntry *e, const char *boot_id) {
        if (RAND_bytes(e->boot_secret, sizeof e->boot_secret) != 1)
                return -EIO;
        e->secret_confirmed = false;
        return free_and_strdup(&e->secret_boot, strempty(boot_id));
}

static bool fast_keep(const char *instance_id, const char *boot_id, uint64_t n, uint64_t sequence, uint64_t seen_usec,
                      int action, const char *reason, int64_t deadline_unix_ms, bool force, void *userdata);

#define REFUSE(res, code, text)                                                     \
        do {                                                                          \
                result = (res);                                                       \
                d.status = NODESMITH__V1__NODE_DIRECTIVE__STATUS__##code;             \
                d.error = (char *) (text);                                            \
                log_refusal(c, result, d.error, instance);                            \
                goto reply;                                                           \
        } while (0)

int agent_server_handle_report(const uint8_t *req, size_t len, uint8_t *reply, size_t reply_size,
                               size_t *ret_len, void *userdata) {
        AgentServer *c = userdata;
        Nodesmith__V1__NodeDirective d = NODESMITH__V1__NODE_DIRECTIVE__INIT;
        ReportResult result = REPORT_OK;
        const char *instance = NULL, *why = NULL;
        char errbuf[160];
        NodeEntry *e = NULL;
        PbArena *arena = NULL;
        Nodesmith__V1__AgentReport *env = NULL;
        Nodesmith__V1__NodeState *st = NULL;
        AttestReason attest_why = ATTEST_REASON_NONE;
        bool attested = false;
        WireView view;
        char peer_instance[65];
        int secret = SECRET_NEW;

        d.protocol_version = NODESMITH__V1__PROTOCOL_VERSION__PROTOCOL_VERSION_CURRENT;
        d.report_interval_ms = (uint32_t) c->cfg.report_interval_ms;
        d.now_unix_ms = now_unix_ms();

        /* Nothing is unpacked or copied before the token is checked: the envelope is read in
         * place (a peer without the token costs no allocation). A large report's scratch memory
         * goes back afterwards (see reply). */
        if (wire_peek_report(req, len, &view) < 0)
                REFUSE(REPORT_INVALID, STATUS_INVALID, "malformed report");
        d.ack_sequence = view.sequence;
        if (wire_span_string(view.instance_id, peer_instance, sizeof peer_instance) >= 0)
                instance = peer_instance;
        if (view.protocol_version != NODESMITH__V1__PROTOCOL_VERSION__PROTOCOL_VERSION_CURRENT) {
                snprintf(errbuf, sizeof errbuf,
                         "coordinator %s speaks protocol version %d, the agent sent version %llu",
                         COORDINATOR_VERSION, NODESMITH__V1__PROTOCOL_VERSION__PROTOCOL_VERSION_CURRENT,
                         (unsigned long long) view.protocol_version);
                REFUSE(REPORT_VERSION_MISMATCH, STATUS_VERSION_MISMATCH, errbuf);
        }
        if (!wire_span_equal(view.token, c->cfg.token))
                REFUSE(REPORT_UNAUTHENTICATED, STATUS_UNAUTHENTICATED, "wrong bootstrap token");

        /* The envelope is small; its allocations go to a scratch arena reused for every report. */
        pb_arena_reset(c->scratch);
        env = nodesmith__v1__agent_report__unpack(pb_arena_allocator(c->scratch), len, req);
        if (!env)
                REFUSE(REPORT_INVALID, STATUS_INVALID, "malformed report");
        instance = env->instance_id;
        if (env->sequence > implausible_sequence())
                REFUSE(REPORT_INVALID, STATUS_INVALID, "implausible sequence (ahead of the clock)");
        if (isempty(env->instance_id) || strlen(env->instance_id) > 64)
                REFUSE(REPORT_INVALID, STATUS_INVALID, "report carries no valid instance id");
        if (strlen(strempty(env->boot_id)) > 64)
                REFUSE(REPORT_INVALID, STATUS_INVALID, "boot id too long");

        if (registry_is_buried(c->registry, env->instance_id)) {
                /* terminated: whatever it still says changes nothing */
                d.action = NODESMITH__V1__NODE_DIRECTIVE__ACTION__ACTION_DRAIN;
                d.reason = (char *) "terminated";
                d.force = true;
                goto reply;
        }
        e = registry_get(c->registry, env->instance_id);
        if (c->fast && e) /* first what the fast answers saw of this node */
                fast_path_sync_one(c->fast, env->instance_id, fast_keep, c);
        if (attestor_mode(c->attest) != ATTEST_OFF) {
                AttestVerdict v = attest_report(c, env, e, &arena, &st, &attest_why);
                attested = v == ATTEST_ACCEPT; /* the agent may leave its document out */
                if (attestor_mode(c->attest) == ATTEST_REQUIRED && v == ATTEST_PENDING) {
                        /* not an answer yet: the report changes nothing, the agent sends again */
                        result = REPORT_PENDING;
                        d.status = NODESMITH__V1__NODE_DIRECTIVE__STATUS__STATUS_PENDING;
                        d.error = (char *) "attestation in progress (asking EC2 about this instance); send again";
                        e = NULL;
                        goto reply;
                }
                if (attestor_mode(c->attest) == ATTEST_REQUIRED && v == ATTEST_REFUSE) {
                        /* the attestor logged why; the agent gets what a wrong token gets */
                        result = REPORT_UNAUTHENTICATED;
                        d.status = NODESMITH__V1__NODE_DIRECTIVE__STATUS__STATUS_UNAUTHENTICATED;
                        snprintf(errbuf, sizeof errbuf, "attestation refused: %s",
                                 attest_reason_describe(attest_why));
                        d.error = errbuf;
                        e = NULL;
                        goto reply;
                }
        }
        secret = boot_secret_check(c, e, env->boot_id, view.boot_secret, &why);
        if (secret < 0)
                REFUSE(REPORT_UNAUTHENTICATED, STATUS_UNAUTHENTICATED, why);
        if (registry_is_duplicate(e, env->boot_id, env->sequence)) {
                result = REPORT_DUPLICATE; /* still answered with the desired state */
                goto directive;
        }
        if (registry_state_unchanged(e, env->state.data, env->state.len)) {
                /* the steady state: same bytes, nothing to re-read */
                registry_touch(e, env->sequence, server_now(c));
                c->metrics.reports_unchanged_total++;
                goto directive;
        }

        if (!st)
                st = state_unpack(c, env, &arena);
        if (!st)
                REFUSE(REPORT_INVALID, STATUS_INVALID, "malformed node state");
        if (!state_valid(c, env, st, &why))
                REFUSE(REPORT_INVALID, STATUS_INVALID, why);
        /* the Node it speaks for must be its instance's (providerID), never one it merely names */
        if (node_binding_check(c->ports.nodes ? c->ports.nodes(c->ports.userdata) : NULL, env->instance_id, st->identity->node_name,
                               &why) < 0) {
                snprintf(errbuf, sizeof errbuf, "node_name %.64s: %s", st->identity->node_name, why);
                REFUSE(REPORT_NODE_MISMATCH, STATUS_UNAUTHENTICATED, errbuf);
        }

        bool is_new = false;
        int k = registry_put(c->registry, env->instance_id, env->sequence, st, arena, env->state.data,
                             env->state.len, server_now(c), &e, &is_new);
        if (k == -ENOSPC)
                REFUSE(REPORT_OVERLOADED, STATUS_OVERLOADED, "coordinator at its node limit (max-nodes)");
        if (k < 0)
                REFUSE(REPORT_OVERLOADED, STATUS_OVERLOADED, "coordinator out of memory");
        arena = NULL; /* the registry owns it now */
        if (is_new) {
                c->metrics.nodes_registered_total++;
                const Nodesmith__V1__Identity *id = e->state->identity;
                log_info("Node %s registered: %s %s in %s, allocatable %lldm CPU, %lld MiB, %lld pods.",
                         id->instance_id, isempty(id->node_name) ? "-" : id->node_name,
                         isempty(id->instance_type) ? "?" : id->instance_type,
                         isempty(id->zone) ? "?" : id->zone,
                         (long long) e->state->allocatable->cpu_millis,
                         (long long) (e->state->allocatable->memory_bytes >> 20),
                         (long long) e->state->allocatable->pods);
        }
        if (registry_sync_notices(e, d.now_unix_ms, agent_server_notice_changed, c) < 0)
                log_warning("Node %s: out of memory recording notices.", e->instance_id);
        agent_server_apply_notices(c, e);

directive:
        if (e) {
                /* an agent that reports drains its node itself: a drain of ours for it stops */
                e->heard_usec = server_now(c);
                if (c->ports.agent_reported)
                        c->ports.agent_reported(c->ports.userdata, e);
                d.action = e->action;
                d.reason = e->reason;
                d.deadline_unix_ms = e->deadline_unix_ms;
                d.force = e->force;
                d.attested = attested;
                /* the secret goes only to a report that presented it, or that it is issued to */
                if (secret == SECRET_NEW && result == REPORT_OK && boot_secret_issue(e, env->boot_id) < 0)
                        log_warning("Node %s: cannot issue its boot secret.", e->instance_id);
                else if (secret == SECRET_KEEP && view.boot_secret.len > 0)
                        e->secret_confirmed = true;
                if ((secret == SECRET_KEEP || result == REPORT_OK) && e->secret_boot &&
                    streq(e->secret_boot, strempty(env->boot_id)))
                        d.boot_secret = (ProtobufCBinaryData) { .len = sizeof e->boot_secret, .data = e->boot_secret };
                /* the next unchanged report of this boot is answered in NNG's threads; not while
                 * the node drains (the coordinator may drain for it when it falls silent, and must
                 * stop the moment it reports again) */
                if (c->fast && result == REPORT_OK && e->state && e->state->identity && !e->state->shutting_down &&
                    e->action == NODESMITH__V1__NODE_DIRECTIVE__ACTION__ACTION_RUN &&
                    (attestor_mode(c->attest) == ATTEST_OFF || attested))
                        fast_path_remember(c->fast, e, env->boot_id, attested, server_now(c));
        }
reply:
        c->metrics.reports[result]++;
        pb_arena_free(arena); /* a state that was refused */
        if (len > SCRATCH_KEEP)
                pb_arena_trim(c->scratch, SCRATCH_KEEP);
        size_t n = nodesmith__v1__node_directive__get_packed_size(&d);
        if (n > reply_size)
                return -EMSGSIZE;
        *ret_len = nodesmith__v1__node_directive__pack(&d, reply);
        /* the connection proved itself: it leaves the unauthenticated pool (link-guard.h) */
        return result == REPORT_OK || result == REPORT_DUPLICATE || result == REPORT_PENDING;
}

int agent_server_fast_answer(const uint8_t *req, size_t len, uint8_t *reply, size_t reply_size, size_t *ret_len,
                             void *userdata) {
        AgentServer *c = userdata;
        return fast_path_answer(c->fast, req, len, reply, reply_size, ret_len);
}

/* What the fast answers saw goes into the registry and the metrics, as the loop would have
 * recorded each unchanged report; a node whose reports the loop must see again is dropped. */
static bool fast_keep(const char *instance_id, const char *boot_id, uint64_t n, uint64_t sequence, uint64_t seen_usec,
                      int action, const char *reason, int64_t deadline_unix_ms, bool force, void *userdata) {
        AgentServer *c = userdata;
        NodeEntry *e = registry_get(c->registry, instance_id);
        bool same_boot = e && e->state && e->state->identity && streq(strempty(e->state->identity->boot_id), boot_id);

        c->metrics.reports[REPORT_OK] += n;
        c->metrics.reports_unchanged_total += n;
        if (!same_boot)
                return false;
        if (n > 0) {
                e->sequence = MAX(e->sequence, sequence);
                e->last_seen_usec = MAX(e->last_seen_usec, seen_usec);
                e->heard_usec = MAX(e->heard_usec, seen_usec);
                e->reports += n;
                if (c->ports.agent_reported)
                        c->ports.agent_reported(c->ports.userdata, e);
        }
        if (e->state->shutting_down || (int) e->action != action || e->force != force ||
            e->deadline_unix_ms != deadline_unix_ms || !streq_ptr(e->reason, reason))
                return false;
        /* as attest_report() accepts a bound boot */
        return attestor_mode(c->attest) != ATTEST_WARN || attestor_accepted(c->attest, instance_id, boot_id);
}

void agent_server_fast_sync(AgentServer *c) {
        if (c->fast)
                fast_path_sync(c->fast, fast_keep, c);
}

void agent_server_fast_forget(AgentServer *c, const char *instance_id) {
        if (c && c->fast)
                fast_path_forget(c->fast, instance_id, fast_keep, c);
}
