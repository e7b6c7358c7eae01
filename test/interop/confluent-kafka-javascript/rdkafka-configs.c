/*
 * DescribeConfigs, AlterConfigs and IncrementalAlterConfigs through the librdkafka that
 * @confluentinc/kafka-javascript builds (its JavaScript API has no config calls). Built by install.sh against
 * node_modules/@confluentinc/kafka-javascript/build/deps; FlowMQ's e2e tests run it.
 *
 *   rdkafka-configs BOOTSTRAP describe TOPIC
 *   rdkafka-configs BOOTSTRAP alter TOPIC name=value...            (AlterConfigs: replaces the topic's configs)
 *   rdkafka-configs BOOTSTRAP incremental TOPIC set:name=value delete:name append:name=v subtract:name=v...
 *
 * Prints one JSON object: {"error":..., "resources":[{"name","error","message","configs":[...]}]}. Exit code 0
 * when the admin call itself completed (per-resource errors are in the output), 1 otherwise.
 */
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void json_str(const char *s) {
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

static void print_entry(const rd_kafka_ConfigEntry_t *e, int with_synonyms) {
        fputs("{\"name\":", stdout);
        json_str(rd_kafka_ConfigEntry_name(e));
        fputs(",\"value\":", stdout);
        json_str(rd_kafka_ConfigEntry_value(e));
        fputs(",\"source\":", stdout);
        json_str(rd_kafka_ConfigSource_name(rd_kafka_ConfigEntry_source(e)));
        printf(",\"readOnly\":%s,\"isDefault\":%s,\"isSensitive\":%s",
               rd_kafka_ConfigEntry_is_read_only(e) ? "true" : "false",
               rd_kafka_ConfigEntry_is_default(e) ? "true" : "false",
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

static void print_resources(const rd_kafka_ConfigResource_t **rs, size_t n) {
        size_t i, j;
        fputs("{\"error\":null,\"resources\":[", stdout);
        for (i = 0; i < n; i++) {
                size_t cnt;
                const rd_kafka_ConfigEntry_t **ents = rd_kafka_ConfigResource_configs(rs[i], &cnt);
                if (i)
                        putchar(',');
                fputs("{\"name\":", stdout);
                json_str(rd_kafka_ConfigResource_name(rs[i]));
                fputs(",\"error\":", stdout);
                json_str(rd_kafka_ConfigResource_error(rs[i]) ? rd_kafka_err2name(rd_kafka_ConfigResource_error(rs[i])) : NULL);
                fputs(",\"message\":", stdout);
                json_str(rd_kafka_ConfigResource_error(rs[i]) ? rd_kafka_ConfigResource_error_string(rs[i]) : NULL);
                fputs(",\"configs\":[", stdout);
                for (j = 0; j < cnt; j++) {
                        if (j)
                                putchar(',');
                        print_entry(ents[j], 1);
                }
                fputs("]}", stdout);
        }
        fputs("]}\n", stdout);
}

static int fail(const char *what, const char *msg) {
        fputs("{\"error\":", stdout);
        json_str(what);
        fputs(",\"message\":", stdout);
        json_str(msg);
        fputs("}\n", stdout);
        return 1;
}

int main(int argc, char **argv) {
        char err[512];
        const char *op, *topic;
        rd_kafka_conf_t *conf;
        rd_kafka_t *rk;
        rd_kafka_queue_t *q;
        rd_kafka_ConfigResource_t *res;
        rd_kafka_AdminOptions_t *opts;
        rd_kafka_admin_op_t kind;
        rd_kafka_event_t *ev;
        size_t n;
        int i, rc = 0;

        if (argc < 4) {
                fprintf(stderr, "usage: %s BOOTSTRAP describe|alter|incremental TOPIC [changes...]\n", argv[0]);
                return 2;
        }
        op    = argv[2];
        topic = argv[3];
        conf  = rd_kafka_conf_new();
        if (rd_kafka_conf_set(conf, "bootstrap.servers", argv[1], err, sizeof(err)) != RD_KAFKA_CONF_OK)
                return fail("CONF", err);
        /* Extra librdkafka properties from the environment, as "k=v;k=v" (SASL, TLS). */
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
        q   = rd_kafka_queue_new(rk);
        res = rd_kafka_ConfigResource_new(RD_KAFKA_RESOURCE_TOPIC, topic);

        if (!strcmp(op, "describe"))
                kind = RD_KAFKA_ADMIN_OP_DESCRIBECONFIGS;
        else if (!strcmp(op, "alter"))
                kind = RD_KAFKA_ADMIN_OP_ALTERCONFIGS;
        else if (!strcmp(op, "incremental"))
                kind = RD_KAFKA_ADMIN_OP_INCREMENTALALTERCONFIGS;
        else
                return fail("USAGE", op);

        for (i = 4; i < argc; i++) {
                char *arg = strdup(argv[i]), *name = arg, *value = NULL, *eq;
                rd_kafka_AlterConfigOpType_t t = RD_KAFKA_ALTER_CONFIG_OP_TYPE_SET;
                if (kind == RD_KAFKA_ADMIN_OP_INCREMENTALALTERCONFIGS) {
                        char *colon = strchr(arg, ':');
                        if (!colon)
                                return fail("USAGE", argv[i]);
                        *colon = '\0';
                        name   = colon + 1;
                        if (!strcmp(arg, "set"))
                                t = RD_KAFKA_ALTER_CONFIG_OP_TYPE_SET;
                        else if (!strcmp(arg, "delete"))
                                t = RD_KAFKA_ALTER_CONFIG_OP_TYPE_DELETE;
                        else if (!strcmp(arg, "append"))
                                t = RD_KAFKA_ALTER_CONFIG_OP_TYPE_APPEND;
                        else if (!strcmp(arg, "subtract"))
                                t = RD_KAFKA_ALTER_CONFIG_OP_TYPE_SUBTRACT;
                        else
                                return fail("USAGE", argv[i]);
                }
                eq = strchr(name, '=');
                if (eq) {
                        *eq   = '\0';
                        value = eq + 1;
                }
                if (kind == RD_KAFKA_ADMIN_OP_INCREMENTALALTERCONFIGS) {
                        rd_kafka_error_t *e = rd_kafka_ConfigResource_add_incremental_config(res, name, t, value);
                        if (e)
                                return fail("USAGE", rd_kafka_error_string(e));
                } else if (kind == RD_KAFKA_ADMIN_OP_ALTERCONFIGS) {
                        rd_kafka_ConfigResource_set_config(res, name, value);
                }
        }

        opts = rd_kafka_AdminOptions_new(rk, kind);
        rd_kafka_AdminOptions_set_request_timeout(opts, 10000, err, sizeof(err));
        if (kind == RD_KAFKA_ADMIN_OP_DESCRIBECONFIGS)
                rd_kafka_DescribeConfigs(rk, &res, 1, opts, q);
        else if (kind == RD_KAFKA_ADMIN_OP_ALTERCONFIGS)
                rd_kafka_AlterConfigs(rk, &res, 1, opts, q);
        else
                rd_kafka_IncrementalAlterConfigs(rk, &res, 1, opts, q);

        ev = rd_kafka_queue_poll(q, 20000);
        if (!ev) {
                rc = fail("TIMEOUT", "no admin result within 20 s");
        } else if (rd_kafka_event_error(ev)) {
                rc = fail(rd_kafka_err2name(rd_kafka_event_error(ev)), rd_kafka_event_error_string(ev));
        } else if (kind == RD_KAFKA_ADMIN_OP_DESCRIBECONFIGS) {
                const rd_kafka_ConfigResource_t **rs =
                    rd_kafka_DescribeConfigs_result_resources(rd_kafka_event_DescribeConfigs_result(ev), &n);
                print_resources(rs, n);
        } else if (kind == RD_KAFKA_ADMIN_OP_ALTERCONFIGS) {
                const rd_kafka_ConfigResource_t **rs =
                    rd_kafka_AlterConfigs_result_resources(rd_kafka_event_AlterConfigs_result(ev), &n);
                print_resources(rs, n);
        } else {
                const rd_kafka_ConfigResource_t **rs = rd_kafka_IncrementalAlterConfigs_result_resources(
                    rd_kafka_event_IncrementalAlterConfigs_result(ev), &n);
                print_resources(rs, n);
        }
        if (ev)
                rd_kafka_event_destroy(ev);
        rd_kafka_AdminOptions_destroy(opts);
        rd_kafka_ConfigResource_destroy(res);
        rd_kafka_queue_destroy(q);
        rd_kafka_destroy(rk);
        return rc;
}
