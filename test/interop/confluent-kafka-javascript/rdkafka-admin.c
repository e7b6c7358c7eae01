/*
 * The admin calls of a current librdkafka (the one @confluentinc/kafka-javascript builds) that its JavaScript API
 * lacks, for FlowMQ's e2e tests (test/e2e/kafka-admin-librdkafka.test.ts compiles it against the package's
 * librdkafka, as install.sh does for rdkafka-configs). One admin call per run, one JSON object printed:
 *
 *   rdkafka-admin BOOTSTRAP cluster                               DescribeCluster
 *   rdkafka-admin BOOTSTRAP configs topic|broker NAME              DescribeConfigs (with synonyms)
 *   rdkafka-admin BOOTSTRAP groups                                ListConsumerGroups
 *   rdkafka-admin BOOTSTRAP describe-groups GROUP...              DescribeConsumerGroups
 *   rdkafka-admin BOOTSTRAP group-offsets GROUP                   ListConsumerGroupOffsets (every partition)
 *   rdkafka-admin BOOTSTRAP offsets earliest|latest TOPIC:P...    ListOffsets
 *   rdkafka-admin BOOTSTRAP acls                                  DescribeAcls (every binding)
 *   rdkafka-admin BOOTSTRAP delete-group-offsets GROUP TOPIC:P... DeleteConsumerGroupOffsets
 *   rdkafka-admin BOOTSTRAP elect preferred|unclean TOPIC:P...    ElectLeaders
 *   rdkafka-admin BOOTSTRAP describe-scram USER...                DescribeUserScramCredentials
 *   rdkafka-admin BOOTSTRAP alter-scram upsert:USER:MECH:ITER:PASSWORD | delete:USER:MECH ...
 *                                                                 AlterUserScramCredentials (MECH 256 or 512;
 *                                                                 librdkafka salts and hashes the password)
 *
 * Extra librdkafka properties come from RDKAFKA_CONF ("k=v;k=v", e.g. SASL). Exit code 0 when the admin call
 * completed (per-item errors are in the output), 1 otherwise.
 */
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void js(const char *s) {
        if (!s) {
                fputs("null", stdout);
                return;
        }
        putchar('"');
        for (; *s; s++) {
                unsigned char c = (unsigned char)*s;
                if (c == '"' || c == '\\')
                        printf("\\%c", c);
                else if (c < 0x20)
                        printf("\\u%04x", c);
                else
                        putchar(c);
        }
        putchar('"');
}

/* An error's name, null for none (some results carry an error object whose code is NO_ERROR). */
static const char *errname(const rd_kafka_error_t *e) {
        return e && rd_kafka_error_code(e) ? rd_kafka_err2name(rd_kafka_error_code(e)) : NULL;
}

static int fail(const char *what, const char *msg) {
        fputs("{\"error\":", stdout);
        js(what);
        fputs(",\"message\":", stdout);
        js(msg);
        fputs("}\n", stdout);
        return 1;
}

/* "topic:partition" arguments into a list (offset field set to `offset`). */
static rd_kafka_topic_partition_list_t *partitions(char **args, int n, int64_t offset) {
        rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(n);
        int i;
        for (i = 0; i < n; i++) {
                char *a = strdup(args[i]), *colon = strrchr(a, ':');
                if (!colon) {
                        free(a);
                        continue;
                }
                *colon = '\0';
                rd_kafka_topic_partition_list_add(l, a, atoi(colon + 1))->offset = offset;
                free(a);
        }
        return l;
}

static void print_partitions(const rd_kafka_topic_partition_list_t *l) {
        int i;
        putchar('[');
        for (i = 0; l && i < l->cnt; i++) {
                if (i)
                        putchar(',');
                fputs("{\"topic\":", stdout);
                js(l->elems[i].topic);
                printf(",\"partition\":%d,\"offset\":%lld,\"error\":", l->elems[i].partition, (long long)l->elems[i].offset);
                js(l->elems[i].err ? rd_kafka_err2name(l->elems[i].err) : NULL);
                putchar('}');
        }
        putchar(']');
}

static void print_group_results(const rd_kafka_group_result_t **gs, size_t n) {
        size_t i;
        fputs("{\"error\":null,\"groups\":[", stdout);
        for (i = 0; i < n; i++) {
                if (i)
                        putchar(',');
                fputs("{\"group\":", stdout);
                js(rd_kafka_group_result_name(gs[i]));
                fputs(",\"error\":", stdout);
                js(errname(rd_kafka_group_result_error(gs[i])));
                fputs(",\"partitions\":", stdout);
                print_partitions(rd_kafka_group_result_partitions(gs[i]));
                putchar('}');
        }
        fputs("]}\n", stdout);
}

static void print_entry(const rd_kafka_ConfigEntry_t *e, int with_synonyms) {
        fputs("{\"name\":", stdout);
        js(rd_kafka_ConfigEntry_name(e));
        fputs(",\"value\":", stdout);
        js(rd_kafka_ConfigEntry_value(e));
        fputs(",\"source\":", stdout);
        js(rd_kafka_ConfigSource_name(rd_kafka_ConfigEntry_source(e)));
        printf(",\"readOnly\":%s,\"isSensitive\":%s", rd_kafka_ConfigEntry_is_read_only(e) ? "true" : "false",
               rd_kafka_ConfigEntry_is_sensitive(e) ? "true" : "false");
        if (with_synonyms) {
                size_t n, i;
                const rd_kafka_ConfigEntry_t **syn = rd_kafka_ConfigEntry_synonyms(e, &n);
                fputs(",\"synonyms\":[", stdout);
                for (i = 0; i < n; i++) {
                        if (i)
                                putchar(',');
                        print_entry(syn[i], 0);
                }
                putchar(']');
        }
        putchar('}');
}

int main(int argc, char **argv) {
        char err[512];
        const char *op;
        rd_kafka_conf_t *conf;
        rd_kafka_t *rk;
        rd_kafka_queue_t *q;
        rd_kafka_AdminOptions_t *opts;
        rd_kafka_event_t *ev;
        rd_kafka_admin_op_t kind;
        size_t n, i, j;
        int rc = 0;

        if (argc < 3) {
                fprintf(stderr, "usage: %s BOOTSTRAP OP [args...]\n", argv[0]);
                return 2;
        }
        op   = argv[2];
        conf = rd_kafka_conf_new();
        if (rd_kafka_conf_set(conf, "bootstrap.servers", argv[1], err, sizeof(err)) != RD_KAFKA_CONF_OK)
                return fail("CONF", err);
        if (getenv("RDKAFKA_CONF")) {
                char *all = strdup(getenv("RDKAFKA_CONF")), *save = NULL, *kv;
                for (kv = strtok_r(all, ";", &save); kv; kv = strtok_r(NULL, ";", &save)) {
                        char *eq = strchr(kv, '=');
                        if (!eq)
                                continue;
                        *eq = '\0';
                        if (rd_kafka_conf_set(conf, kv, eq + 1, err, sizeof(err)) != RD_KAFKA_CONF_OK)
                                return fail("CONF", err);
                }
                free(all);
        }
        rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
        if (!rk)
                return fail("CLIENT", err);
        q = rd_kafka_queue_new(rk);

        if (!strcmp(op, "cluster"))
                kind = RD_KAFKA_ADMIN_OP_DESCRIBECLUSTER;
        else if (!strcmp(op, "configs"))
                kind = RD_KAFKA_ADMIN_OP_DESCRIBECONFIGS;
        else if (!strcmp(op, "groups"))
                kind = RD_KAFKA_ADMIN_OP_LISTCONSUMERGROUPS;
        else if (!strcmp(op, "describe-groups"))
                kind = RD_KAFKA_ADMIN_OP_DESCRIBECONSUMERGROUPS;
        else if (!strcmp(op, "group-offsets"))
                kind = RD_KAFKA_ADMIN_OP_LISTCONSUMERGROUPOFFSETS;
        else if (!strcmp(op, "offsets"))
                kind = RD_KAFKA_ADMIN_OP_LISTOFFSETS;
        else if (!strcmp(op, "acls"))
                kind = RD_KAFKA_ADMIN_OP_DESCRIBEACLS;
        else if (!strcmp(op, "delete-group-offsets"))
                kind = RD_KAFKA_ADMIN_OP_DELETECONSUMERGROUPOFFSETS;
        else if (!strcmp(op, "elect"))
                kind = RD_KAFKA_ADMIN_OP_ELECTLEADERS;
        else if (!strcmp(op, "describe-scram"))
                kind = RD_KAFKA_ADMIN_OP_DESCRIBEUSERSCRAMCREDENTIALS;
        else if (!strcmp(op, "alter-scram"))
                kind = RD_KAFKA_ADMIN_OP_ALTERUSERSCRAMCREDENTIALS;
        else
                return fail("USAGE", op);
        opts = rd_kafka_AdminOptions_new(rk, kind);
        rd_kafka_AdminOptions_set_request_timeout(opts, 10000, err, sizeof(err));

        switch (kind) {
        case RD_KAFKA_ADMIN_OP_DESCRIBECLUSTER:
                rd_kafka_DescribeCluster(rk, opts, q);
                break;
        case RD_KAFKA_ADMIN_OP_DESCRIBECONFIGS: {
                rd_kafka_ConfigResource_t *res;
                if (argc < 5)
                        return fail("USAGE", "configs topic|broker NAME");
                res = rd_kafka_ConfigResource_new(!strcmp(argv[3], "broker") ? RD_KAFKA_RESOURCE_BROKER : RD_KAFKA_RESOURCE_TOPIC, argv[4]);
                rd_kafka_DescribeConfigs(rk, &res, 1, opts, q);
                rd_kafka_ConfigResource_destroy(res);
                break;
        }
        case RD_KAFKA_ADMIN_OP_LISTCONSUMERGROUPS:
                rd_kafka_ListConsumerGroups(rk, opts, q);
                break;
        case RD_KAFKA_ADMIN_OP_DESCRIBECONSUMERGROUPS:
                rd_kafka_DescribeConsumerGroups(rk, (const char **)argv + 3, argc - 3, opts, q);
                break;
        case RD_KAFKA_ADMIN_OP_LISTCONSUMERGROUPOFFSETS: {
                rd_kafka_ListConsumerGroupOffsets_t *l;
                if (argc < 4)
                        return fail("USAGE", "group-offsets GROUP");
                l = rd_kafka_ListConsumerGroupOffsets_new(argv[3], NULL);
                rd_kafka_ListConsumerGroupOffsets(rk, &l, 1, opts, q);
                rd_kafka_ListConsumerGroupOffsets_destroy(l);
                break;
        }
        case RD_KAFKA_ADMIN_OP_LISTOFFSETS: {
                rd_kafka_topic_partition_list_t *l;
                if (argc < 5)
                        return fail("USAGE", "offsets earliest|latest TOPIC:P...");
                l = partitions(argv + 4, argc - 4, !strcmp(argv[3], "earliest") ? RD_KAFKA_OFFSET_SPEC_EARLIEST : RD_KAFKA_OFFSET_SPEC_LATEST);
                rd_kafka_ListOffsets(rk, l, opts, q);
                rd_kafka_topic_partition_list_destroy(l);
                break;
        }
        case RD_KAFKA_ADMIN_OP_DESCRIBEACLS: {
                rd_kafka_AclBindingFilter_t *f = rd_kafka_AclBindingFilter_new(RD_KAFKA_RESOURCE_ANY, NULL, RD_KAFKA_RESOURCE_PATTERN_ANY, NULL, NULL,
                                                                               RD_KAFKA_ACL_OPERATION_ANY, RD_KAFKA_ACL_PERMISSION_TYPE_ANY, err, sizeof(err));
                if (!f)
                        return fail("USAGE", err);
                rd_kafka_DescribeAcls(rk, f, opts, q);
                rd_kafka_AclBinding_destroy(f);
                break;
        }
        case RD_KAFKA_ADMIN_OP_DELETECONSUMERGROUPOFFSETS: {
                rd_kafka_topic_partition_list_t *l;
                rd_kafka_DeleteConsumerGroupOffsets_t *d;
                if (argc < 5)
                        return fail("USAGE", "delete-group-offsets GROUP TOPIC:P...");
                l = partitions(argv + 4, argc - 4, RD_KAFKA_OFFSET_INVALID);
                d = rd_kafka_DeleteConsumerGroupOffsets_new(argv[3], l);
                rd_kafka_DeleteConsumerGroupOffsets(rk, &d, 1, opts, q);
                rd_kafka_DeleteConsumerGroupOffsets_destroy(d);
                rd_kafka_topic_partition_list_destroy(l);
                break;
        }
        case RD_KAFKA_ADMIN_OP_ELECTLEADERS: {
                rd_kafka_topic_partition_list_t *l;
                rd_kafka_ElectLeaders_t *e;
                if (argc < 5)
                        return fail("USAGE", "elect preferred|unclean TOPIC:P...");
                l = partitions(argv + 4, argc - 4, RD_KAFKA_OFFSET_INVALID);
                e = rd_kafka_ElectLeaders_new(!strcmp(argv[3], "unclean") ? RD_KAFKA_ELECTION_TYPE_UNCLEAN : RD_KAFKA_ELECTION_TYPE_PREFERRED, l);
                rd_kafka_ElectLeaders(rk, e, opts, q);
                rd_kafka_ElectLeaders_destroy(e);
                rd_kafka_topic_partition_list_destroy(l);
                break;
        }
        case RD_KAFKA_ADMIN_OP_DESCRIBEUSERSCRAMCREDENTIALS:
                rd_kafka_DescribeUserScramCredentials(rk, (const char **)argv + 3, argc - 3, opts, q);
                break;
        case RD_KAFKA_ADMIN_OP_ALTERUSERSCRAMCREDENTIALS: {
                rd_kafka_UserScramCredentialAlteration_t **alts = calloc(argc, sizeof(*alts));
                int k, cnt = 0;
                for (k = 3; k < argc; k++) {
                        char *a = strdup(argv[k]), *save = NULL;
                        char *what = strtok_r(a, ":", &save), *user = strtok_r(NULL, ":", &save), *mech = strtok_r(NULL, ":", &save);
                        rd_kafka_ScramMechanism_t m;
                        if (!what || !user || !mech)
                                return fail("USAGE", argv[k]);
                        m = !strcmp(mech, "512") ? RD_KAFKA_SCRAM_MECHANISM_SHA_512 : RD_KAFKA_SCRAM_MECHANISM_SHA_256;
                        if (!strcmp(what, "delete")) {
                                alts[cnt++] = rd_kafka_UserScramCredentialDeletion_new(user, m);
                        } else {
                                char *iter = strtok_r(NULL, ":", &save), *pw = strtok_r(NULL, "", &save);
                                if (!iter || !pw)
                                        return fail("USAGE", argv[k]);
                                alts[cnt++] = rd_kafka_UserScramCredentialUpsertion_new(user, m, atoi(iter), (const unsigned char *)pw, strlen(pw), NULL, 0);
                        }
                }
                rd_kafka_AlterUserScramCredentials(rk, alts, cnt, opts, q);
                rd_kafka_UserScramCredentialAlteration_destroy_array(alts, cnt);
                free(alts);
                break;
        }
        default:
                return fail("USAGE", op);
        }

        ev = rd_kafka_queue_poll(q, 20000);
        if (!ev)
                rc = fail("TIMEOUT", "no admin result within 20 s");
        else if (rd_kafka_event_error(ev))
                rc = fail(rd_kafka_err2name(rd_kafka_event_error(ev)), rd_kafka_event_error_string(ev));
        else if (kind == RD_KAFKA_ADMIN_OP_DESCRIBECLUSTER) {
                const rd_kafka_DescribeCluster_result_t *r = rd_kafka_event_DescribeCluster_result(ev);
                const rd_kafka_Node_t **nodes = rd_kafka_DescribeCluster_result_nodes(r, &n);
                const rd_kafka_Node_t *ctl    = rd_kafka_DescribeCluster_result_controller(r);
                fputs("{\"error\":null,\"clusterId\":", stdout);
                js(rd_kafka_DescribeCluster_result_cluster_id(r));
                printf(",\"controller\":%d,\"nodes\":[", ctl ? rd_kafka_Node_id(ctl) : -1);
                for (i = 0; i < n; i++) {
                        if (i)
                                putchar(',');
                        printf("{\"id\":%d,\"host\":", rd_kafka_Node_id(nodes[i]));
                        js(rd_kafka_Node_host(nodes[i]));
                        printf(",\"port\":%u}", rd_kafka_Node_port(nodes[i]));
                }
                fputs("]}\n", stdout);
        } else if (kind == RD_KAFKA_ADMIN_OP_DESCRIBECONFIGS) {
                const rd_kafka_ConfigResource_t **rs = rd_kafka_DescribeConfigs_result_resources(rd_kafka_event_DescribeConfigs_result(ev), &n);
                fputs("{\"error\":null,\"resources\":[", stdout);
                for (i = 0; i < n; i++) {
                        size_t cnt;
                        const rd_kafka_ConfigEntry_t **ents = rd_kafka_ConfigResource_configs(rs[i], &cnt);
                        if (i)
                                putchar(',');
                        fputs("{\"name\":", stdout);
                        js(rd_kafka_ConfigResource_name(rs[i]));
                        fputs(",\"error\":", stdout);
                        js(rd_kafka_ConfigResource_error(rs[i]) ? rd_kafka_err2name(rd_kafka_ConfigResource_error(rs[i])) : NULL);
                        fputs(",\"configs\":[", stdout);
                        for (j = 0; j < cnt; j++) {
                                if (j)
                                        putchar(',');
                                print_entry(ents[j], 1);
                        }
                        fputs("]}", stdout);
                }
                fputs("]}\n", stdout);
        } else if (kind == RD_KAFKA_ADMIN_OP_LISTCONSUMERGROUPS) {
                const rd_kafka_ListConsumerGroups_result_t *r = rd_kafka_event_ListConsumerGroups_result(ev);
                const rd_kafka_ConsumerGroupListing_t **gs   = rd_kafka_ListConsumerGroups_result_valid(r, &n);
                fputs("{\"error\":null,\"groups\":[", stdout);
                for (i = 0; i < n; i++) {
                        if (i)
                                putchar(',');
                        fputs("{\"group\":", stdout);
                        js(rd_kafka_ConsumerGroupListing_group_id(gs[i]));
                        fputs(",\"state\":", stdout);
                        js(rd_kafka_consumer_group_state_name(rd_kafka_ConsumerGroupListing_state(gs[i])));
                        printf(",\"simple\":%s}", rd_kafka_ConsumerGroupListing_is_simple_consumer_group(gs[i]) ? "true" : "false");
                }
                rd_kafka_ListConsumerGroups_result_errors(r, &n);
                printf("],\"errors\":%zu}\n", n);
        } else if (kind == RD_KAFKA_ADMIN_OP_DESCRIBECONSUMERGROUPS) {
                const rd_kafka_ConsumerGroupDescription_t **gs = rd_kafka_DescribeConsumerGroups_result_groups(rd_kafka_event_DescribeConsumerGroups_result(ev), &n);
                fputs("{\"error\":null,\"groups\":[", stdout);
                for (i = 0; i < n; i++) {
                        if (i)
                                putchar(',');
                        fputs("{\"group\":", stdout);
                        js(rd_kafka_ConsumerGroupDescription_group_id(gs[i]));
                        fputs(",\"error\":", stdout);
                        js(errname(rd_kafka_ConsumerGroupDescription_error(gs[i])));
                        fputs(",\"state\":", stdout);
                        js(rd_kafka_consumer_group_state_name(rd_kafka_ConsumerGroupDescription_state(gs[i])));
                        fputs(",\"assignor\":", stdout);
                        js(rd_kafka_ConsumerGroupDescription_partition_assignor(gs[i]));
                        printf(",\"coordinator\":%d,\"members\":[", rd_kafka_ConsumerGroupDescription_coordinator(gs[i]) ? rd_kafka_Node_id(rd_kafka_ConsumerGroupDescription_coordinator(gs[i])) : -1);
                        for (j = 0; j < rd_kafka_ConsumerGroupDescription_member_count(gs[i]); j++) {
                                const rd_kafka_MemberDescription_t *m = rd_kafka_ConsumerGroupDescription_member(gs[i], j);
                                if (j)
                                        putchar(',');
                                fputs("{\"clientId\":", stdout);
                                js(rd_kafka_MemberDescription_client_id(m));
                                fputs(",\"memberId\":", stdout);
                                js(rd_kafka_MemberDescription_consumer_id(m));
                                fputs(",\"host\":", stdout);
                                js(rd_kafka_MemberDescription_host(m));
                                fputs(",\"assignment\":", stdout);
                                print_partitions(rd_kafka_MemberAssignment_partitions(rd_kafka_MemberDescription_assignment(m)));
                                putchar('}');
                        }
                        fputs("]}", stdout);
                }
                fputs("]}\n", stdout);
        } else if (kind == RD_KAFKA_ADMIN_OP_LISTCONSUMERGROUPOFFSETS) {
                const rd_kafka_group_result_t **gs = rd_kafka_ListConsumerGroupOffsets_result_groups(rd_kafka_event_ListConsumerGroupOffsets_result(ev), &n);
                print_group_results(gs, n);
        } else if (kind == RD_KAFKA_ADMIN_OP_DELETECONSUMERGROUPOFFSETS) {
                const rd_kafka_group_result_t **gs = rd_kafka_DeleteConsumerGroupOffsets_result_groups(rd_kafka_event_DeleteConsumerGroupOffsets_result(ev), &n);
                print_group_results(gs, n);
        } else if (kind == RD_KAFKA_ADMIN_OP_LISTOFFSETS) {
                const rd_kafka_ListOffsetsResultInfo_t **infos = rd_kafka_ListOffsets_result_infos(rd_kafka_event_ListOffsets_result(ev), &n);
                fputs("{\"error\":null,\"partitions\":[", stdout);
                for (i = 0; i < n; i++) {
                        const rd_kafka_topic_partition_t *tp = rd_kafka_ListOffsetsResultInfo_topic_partition(infos[i]);
                        if (i)
                                putchar(',');
                        fputs("{\"topic\":", stdout);
                        js(tp->topic);
                        printf(",\"partition\":%d,\"offset\":%lld,\"error\":", tp->partition, (long long)tp->offset);
                        js(tp->err ? rd_kafka_err2name(tp->err) : NULL);
                        putchar('}');
                }
                fputs("]}\n", stdout);
        } else if (kind == RD_KAFKA_ADMIN_OP_DESCRIBEACLS) {
                const rd_kafka_AclBinding_t **acls = rd_kafka_DescribeAcls_result_acls(rd_kafka_event_DescribeAcls_result(ev), &n);
                fputs("{\"error\":null,\"acls\":[", stdout);
                for (i = 0; i < n; i++) {
                        if (i)
                                putchar(',');
                        fputs("{\"resourceType\":", stdout);
                        js(rd_kafka_ResourceType_name(rd_kafka_AclBinding_restype(acls[i])));
                        fputs(",\"name\":", stdout);
                        js(rd_kafka_AclBinding_name(acls[i]));
                        fputs(",\"pattern\":", stdout);
                        js(rd_kafka_ResourcePatternType_name(rd_kafka_AclBinding_resource_pattern_type(acls[i])));
                        fputs(",\"principal\":", stdout);
                        js(rd_kafka_AclBinding_principal(acls[i]));
                        fputs(",\"host\":", stdout);
                        js(rd_kafka_AclBinding_host(acls[i]));
                        fputs(",\"operation\":", stdout);
                        js(rd_kafka_AclOperation_name(rd_kafka_AclBinding_operation(acls[i])));
                        fputs(",\"permission\":", stdout);
                        js(rd_kafka_AclPermissionType_name(rd_kafka_AclBinding_permission_type(acls[i])));
                        putchar('}');
                }
                fputs("]}\n", stdout);
        } else if (kind == RD_KAFKA_ADMIN_OP_ELECTLEADERS) {
                const rd_kafka_topic_partition_result_t **ps = rd_kafka_ElectLeaders_result_partitions(rd_kafka_event_ElectLeaders_result(ev), &n);
                fputs("{\"error\":null,\"partitions\":[", stdout);
                for (i = 0; i < n; i++) {
                        const rd_kafka_topic_partition_t *tp = rd_kafka_topic_partition_result_partition(ps[i]);
                        if (i)
                                putchar(',');
                        fputs("{\"topic\":", stdout);
                        js(tp->topic);
                        printf(",\"partition\":%d,\"error\":", tp->partition);
                        js(errname(rd_kafka_topic_partition_result_error(ps[i])));
                        putchar('}');
                }
                fputs("]}\n", stdout);
        } else if (kind == RD_KAFKA_ADMIN_OP_DESCRIBEUSERSCRAMCREDENTIALS) {
                const rd_kafka_UserScramCredentialsDescription_t **ds =
                    rd_kafka_DescribeUserScramCredentials_result_descriptions(rd_kafka_event_DescribeUserScramCredentials_result(ev), &n);
                fputs("{\"error\":null,\"users\":[", stdout);
                for (i = 0; i < n; i++) {
                        if (i)
                                putchar(',');
                        fputs("{\"user\":", stdout);
                        js(rd_kafka_UserScramCredentialsDescription_user(ds[i]));
                        fputs(",\"error\":", stdout);
                        js(errname(rd_kafka_UserScramCredentialsDescription_error(ds[i])));
                        fputs(",\"credentials\":[", stdout);
                        for (j = 0; j < rd_kafka_UserScramCredentialsDescription_scramcredentialinfo_count(ds[i]); j++) {
                                const rd_kafka_ScramCredentialInfo_t *c = rd_kafka_UserScramCredentialsDescription_scramcredentialinfo(ds[i], j);
                                if (j)
                                        putchar(',');
                                printf("{\"mechanism\":%d,\"iterations\":%d}", (int)rd_kafka_ScramCredentialInfo_mechanism(c), rd_kafka_ScramCredentialInfo_iterations(c));
                        }
                        fputs("]}", stdout);
                }
                fputs("]}\n", stdout);
        } else if (kind == RD_KAFKA_ADMIN_OP_ALTERUSERSCRAMCREDENTIALS) {
                const rd_kafka_AlterUserScramCredentials_result_response_t **rs =
                    rd_kafka_AlterUserScramCredentials_result_responses(rd_kafka_event_AlterUserScramCredentials_result(ev), &n);
                fputs("{\"error\":null,\"users\":[", stdout);
                for (i = 0; i < n; i++) {
                        if (i)
                                putchar(',');
                        fputs("{\"user\":", stdout);
                        js(rd_kafka_AlterUserScramCredentials_result_response_user(rs[i]));
                        fputs(",\"error\":", stdout);
                        js(errname(rd_kafka_AlterUserScramCredentials_result_response_error(rs[i])));
                        putchar('}');
                }
                fputs("]}\n", stdout);
        }
        if (ev)
                rd_kafka_event_destroy(ev);
        rd_kafka_AdminOptions_destroy(opts);
        rd_kafka_queue_destroy(q);
        rd_kafka_destroy(rk);
        return rc;
}
