#!/usr/bin/env bash
# Starts, stops and checks the real services that Sluice's tests talk to:
#
#   kafka  Apache Kafka, one broker+controller in KRaft mode, on localhost:9092
#          (PLAINTEXT, controller listener on 127.0.0.1:9093); transactions
#          work (the transaction log is set up for a single node).
#   hdfs   HDFS: Hadoop's MiniDFSCluster, a NameNode with RPC on
#          localhost:9000 (hdfs://localhost:9000; NameNode HTTP on
#          127.0.0.1:9870) and 2 DataNodes, replication 1, simple auth, no
#          permission checks.
#
# Both come from Maven Central (the poms under scripts/services/), resolved
# with mvn into ~/.m2, and run on Java 17. Everything binds to 127.0.0.1.
#
# Usage:
#   scripts/services.sh start   [kafka|hdfs|all]   start (default all; in parallel)
#   scripts/services.sh stop    [kafka|hdfs|all]   stop what this script started
#   scripts/services.sh restart [kafka|hdfs|all]   stop + start, keeping the data
#   scripts/services.sh status  [kafka|hdfs|all]   "kafka: running (pid N)" / "stopped"
#   scripts/services.sh env                        shell exports for tests (eval it)
#   scripts/services.sh logs    kafka|hdfs         path of the service's log
#   scripts/services.sh kafka-topics ARGS...       Kafka's topic tool, e.g.
#       scripts/services.sh kafka-topics --create --topic t --partitions 3
#       (--bootstrap-server localhost:9092 is added unless given)
#   scripts/services.sh kafka-run CLASS ARGS...    any class of the Kafka jars, e.g.
#       org.apache.kafka.tools.ConsoleProducer --bootstrap-server localhost:9092 --topic t
#   scripts/services.sh hdfs-dfs ARGS...           Hadoop's FsShell on hdfs://localhost:9000,
#       e.g. scripts/services.sh hdfs-dfs -ls -R /
#
# Tests: run `scripts/services.sh start all` before `cargo test`; it returns
# once both services answer (or fails with the tail of the service's log).
# `start` on a running service says so and exits 0; `stop` on a stopped one
# exits 0. `restart hdfs` / `restart kafka` keep the stored data (HDFS is
# formatted and Kafka's storage is formatted only on the very first start).
#
# Environment:
#   SLUICE_SERVICES_DIR      data, logs, pids, resolved classpaths
#                            (default $HOME/.cache/sluice-services)
#   SLUICE_SERVICES_TIMEOUT  seconds to wait for a service to answer (180)
#   SLUICE_KAFKA_VERSION     org.apache.kafka:kafka_2.13 version (pom's, 4.4.0)
#   SLUICE_HADOOP_VERSION    hadoop-client-minicluster version (pom's, 3.5.0)
#   SLUICE_HDFS_DATANODES    number of DataNodes (2)
#   SLUICE_HDFS_WEBHDFS=1    also serve WebHDFS on 127.0.0.1:9870 (off: it
#                            adds 5-10 s to the start; the HTTP UI is there)
#   SLUICE_KAFKA_HEAP / SLUICE_HDFS_HEAP   JVM -Xmx (512m / 1g)
#
# On a machine without java/javac/mvn, they are installed with apt-get
# (openjdk-17-jdk-headless, maven; sudo when not root).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SRC="$ROOT/scripts/services"
DIR="${SLUICE_SERVICES_DIR:-$HOME/.cache/sluice-services}"
TIMEOUT="${SLUICE_SERVICES_TIMEOUT:-180}"

KAFKA_PORT=9092
KAFKA_CONTROLLER_PORT=9093
HDFS_PORT=9000
HDFS_HTTP_PORT=9870

KAFKA_DIR="$DIR/kafka"
HDFS_DIR="$DIR/hdfs"

log() { printf '%s\n' "$*" >&2; }
die() { printf 'services.sh: %s\n' "$*" >&2; exit 1; }

usage() {
    sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '/^set -euo/d' -e 's/^# \{0,1\}//' >&2
    exit 2
}

# ---------------------------------------------------------------- tools

# java, javac (for the HDFS main) and mvn; installed on Debian when missing.
ensure_tools() {
    local missing=()
    command -v java >/dev/null 2>&1 || missing+=(java)
    command -v javac >/dev/null 2>&1 || missing+=(javac)
    command -v jar >/dev/null 2>&1 || missing+=(jar)
    command -v mvn >/dev/null 2>&1 || missing+=(mvn)
    [ ${#missing[@]} -eq 0 ] && return 0
    if command -v apt-get >/dev/null 2>&1; then
        log "missing ${missing[*]}: installing openjdk-17-jdk-headless and maven with apt-get"
        local sudo=""
        if [ "$(id -u)" -ne 0 ]; then
            command -v sudo >/dev/null 2>&1 || die "missing ${missing[*]} and not root without sudo: install openjdk-17-jdk-headless and maven"
            sudo="sudo"
        fi
        $sudo apt-get update -qq >&2 || true
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq openjdk-17-jdk-headless maven >&2 \
            || die "apt-get install openjdk-17-jdk-headless maven failed"
    fi
    missing=()
    for c in java javac jar mvn; do command -v "$c" >/dev/null 2>&1 || missing+=("$c"); done
    [ ${#missing[@]} -eq 0 ] || die "missing command(s): ${missing[*]} (need a Java 17 JDK and Maven: apt-get install openjdk-17-jdk-headless maven)"
}

sha_of() { cat "$@" | sha256sum | cut -d' ' -f1; }

# resolve NAME VERSION_PROPERTY VERSION: writes $DIR/NAME/classpath (jars of
# scripts/services/NAME/pom.xml, resolved by Maven) unless it is up to date.
resolve() {
    local name="$1" prop="$2" version="$3"
    local pom="$SRC/$name/pom.xml" out="$DIR/$name/classpath" mvnlog="$DIR/$name/mvn.log"
    local stamp args=() jar ok=1
    mkdir -p "$DIR/$name"
    stamp="$(printf '%s %s\n' "$(sha_of "$pom")" "$version")"
    if [ -s "$out" ] && [ "$(cat "$out.stamp" 2>/dev/null)" = "$stamp" ]; then
        while IFS= read -r jar; do
            [ -f "$jar" ] || ok=0
        done < <(tr ':' '\n' <"$out")
        [ "$ok" = 1 ] && return 0
    fi
    [ -n "$version" ] && args+=("-D$prop=$version")
    log "$name: resolving $(pom_artifacts "$pom" "$version") from Maven Central (mvn, log: $mvnlog)"
    local try
    for try in 1 2; do
        # The second try also re-asks for artifacts Maven noted as missing.
        [ "$try" = 2 ] && args+=(-U)
        # The pom's directory must stay clean (packaging pom: nothing is built).
        if (cd "$DIR/$name" && mvn -B -q -Dstyle.color=never -f "$pom" "${args[@]}" \
                dependency:build-classpath -Dmdep.outputFile="$out.tmp" -Dmdep.pathSeparator=: \
                >"$mvnlog" 2>&1); then
            mv "$out.tmp" "$out"
            printf '%s\n' "$stamp" >"$out.stamp"
            return 0
        fi
        # Two resolutions in parallel can trip over each other's downloads.
        [ "$try" = 1 ] && { log "$name: Maven resolution failed, trying once more"; sleep 2; }
    done
    log "--- tail of $mvnlog:"
    grep -E 'ERROR\]|Could not|Failed' "$mvnlog" | head -5 >&2 || tail -20 "$mvnlog" >&2
    die "$name: Maven could not resolve $(pom_artifacts "$pom" "$version") (see $mvnlog)"
}

# The groupId:artifactId:version lines of a pom's dependencies, for messages.
pom_artifacts() {
    local pom="$1" version="$2"
    awk -v v="$version" '
        /<properties>/ {inprops=1}
        /<\/properties>/ {inprops=0}
        inprops && match($0, /<[a-z.]+version>/) {k=substr($0, RSTART + 1, RLENGTH - 2); p=$0; sub(/^[^>]*>/, "", p); sub(/<.*/, "", p); props[k]=p}
        /<dependency>/ {g=""; a=""; ver=""}
        /<groupId>/ {gsub(/.*<groupId>|<\/groupId>.*/, ""); g=$0}
        /<artifactId>/ {gsub(/.*<artifactId>|<\/artifactId>.*/, ""); a=$0}
        /<version>/ {gsub(/.*<version>|<\/version>.*/, ""); ver=$0}
        /<\/dependency>/ {if (ver ~ /^\$/) {k=ver; gsub(/[${}]/, "", k); ver=(v != "" ? v : props[k])}; printf "%s%s:%s:%s", sep, g, a, ver; sep=", "}
        /<\/dependencies>/ {exit}
    ' "$pom"
}

# ---------------------------------------------------------------- processes

pidfile() { echo "$DIR/$1/pid"; }

# The pid of a running service NAME that this script started, or nothing.
running_pid() {
    local name="$1" pf pid marker
    pf="$(pidfile "$name")"
    [ -f "$pf" ] || return 0
    pid="$(cat "$pf" 2>/dev/null || true)"
    [ -n "$pid" ] || return 0
    case "$name" in
        kafka) marker="kafka.Kafka" ;;
        hdfs) marker="SluiceMiniDfs" ;;
    esac
    # Guard against a recycled pid: the process must be our JVM.
    if [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "$marker"; then
        echo "$pid"
    fi
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# launch NAME LOGFILE CMD...: runs CMD in its own session/process group,
# detached from our stdin/stdout, and records its pid.
launch() {
    local name="$1" logfile="$2"
    shift 2
    setsid "$@" </dev/null >>"$logfile" 2>&1 &
    echo $! >"$(pidfile "$name")"
}

# stop_service NAME: TERM to the process group, wait, then KILL.
stop_service() {
    local name="$1" pid pgid i
    pid="$(running_pid "$name")"
    if [ -z "$pid" ]; then
        rm -f "$(pidfile "$name")"
        echo "$name: not running"
        return 0
    fi
    pgid="$(ps -o pgid= -p "$pid" 2>/dev/null | tr -d ' ' || true)"
    local target="$pid"
    [ "$pgid" = "$pid" ] && target="-$pid"
    echo "$name: stopping (pid $pid)"
    kill -TERM -- "$target" 2>/dev/null || true
    for ((i = 0; i < 300; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        log "$name: did not exit within 30s of SIGTERM, killing it"
        kill -KILL -- "$target" 2>/dev/null || true
        for ((i = 0; i < 50; i++)); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
    fi
    rm -f "$(pidfile "$name")"
    echo "$name: stopped"
}

# wait_ready NAME LOG CHECK: until CHECK succeeds, the process dies, or the
# timeout passes; on failure prints the log's tail and returns 1.
wait_ready() {
    local name="$1" logfile="$2" check="$3" pid start
    pid="$(cat "$(pidfile "$name")")"
    start=$SECONDS
    while :; do
        if ! kill -0 "$pid" 2>/dev/null; then
            log "$name: the process (pid $pid) exited during startup; tail of $logfile:"
            tail -n 40 "$logfile" >&2 || true
            rm -f "$(pidfile "$name")"
            return 1
        fi
        if "$check"; then
            return 0
        fi
        if ((SECONDS - start >= TIMEOUT)); then
            log "$name: not answering after ${TIMEOUT}s (pid $pid, left running; stop it with: $0 stop $name); tail of $logfile:"
            tail -n 40 "$logfile" >&2 || true
            return 1
        fi
        sleep 0.5
    done
}

# ---------------------------------------------------------------- kafka

kafka_classpath() { cat "$KAFKA_DIR/classpath"; }

kafka_write_config() {
    cat >"$KAFKA_DIR/server.properties" <<EOF
# Written by scripts/services.sh on every start.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$KAFKA_CONTROLLER_PORT
listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$KAFKA_CONTROLLER_PORT
advertised.listeners=PLAINTEXT://localhost:$KAFKA_PORT
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$KAFKA_DIR/data
num.partitions=1
auto.create.topics.enable=true
delete.topic.enable=true
group.initial.rebalance.delay.ms=0
# One node: every internal topic has one replica.
offsets.topic.replication.factor=1
offsets.topic.num.partitions=10
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=10
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
default.replication.factor=1
min.insync.replicas=1
EOF
}

kafka_java() {
    java -Xmx256m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Djava.awt.headless=true \
        -Dlog4j2.configurationFile="$SRC/kafka/tools-log4j2.properties" \
        -cp "$(kafka_classpath)" "$@"
}

kafka_ready() {
    port_open "$KAFKA_PORT" && grep -q 'Kafka Server started' "$KAFKA_DIR/logs/server.log" 2>/dev/null
}

start_kafka() {
    local pid
    pid="$(running_pid kafka)"
    if [ -n "$pid" ]; then
        echo "kafka: already running (pid $pid) on localhost:$KAFKA_PORT"
        return 0
    fi
    if port_open "$KAFKA_PORT" || port_open "$KAFKA_CONTROLLER_PORT"; then
        die "kafka: port $KAFKA_PORT or $KAFKA_CONTROLLER_PORT is already in use by a process this script did not start"
    fi
    resolve kafka kafka.version "${SLUICE_KAFKA_VERSION:-}"
    mkdir -p "$KAFKA_DIR/data" "$KAFKA_DIR/logs"
    kafka_write_config
    if [ ! -f "$KAFKA_DIR/data/meta.properties" ]; then
        local id=""
        # A Kafka cluster id: 16 random bytes, base64url without padding (not
        # starting with '-', which the tool would read as an option).
        while [ -z "$id" ] || [ "${id#-}" != "$id" ]; do
            id="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')"
        done
        echo "$id" >"$KAFKA_DIR/cluster.id"
        log "kafka: formatting storage in $KAFKA_DIR/data (cluster id $id)"
        kafka_java kafka.tools.StorageTool format --cluster-id "$id" \
            --config "$KAFKA_DIR/server.properties" --ignore-formatted >"$KAFKA_DIR/format.log" 2>&1 \
            || { cat "$KAFKA_DIR/format.log" >&2; die "kafka: formatting the storage failed"; }
    fi
    # Keep one previous log; the new one is what readiness is read from.
    [ -f "$KAFKA_DIR/logs/server.log" ] && mv -f "$KAFKA_DIR/logs/server.log" "$KAFKA_DIR/logs/server.log.1"
    : >"$KAFKA_DIR/stdout.log"
    mkdir -p "$KAFKA_DIR/tmp"
    local heap="${SLUICE_KAFKA_HEAP:-512m}"
    launch kafka "$KAFKA_DIR/stdout.log" java -Xmx"$heap" -Xms"$heap" -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
        -Djava.awt.headless=true -Djava.io.tmpdir="$KAFKA_DIR/tmp" \
        -Dkafka.logs.dir="$KAFKA_DIR/logs" \
        -Dlog4j2.configurationFile="$SRC/kafka/log4j2.properties" \
        -cp "$(kafka_classpath)" kafka.Kafka "$KAFKA_DIR/server.properties"
    log "kafka: started (pid $(cat "$(pidfile kafka)")), waiting for localhost:$KAFKA_PORT"
    if ! wait_ready kafka "$KAFKA_DIR/logs/server.log" kafka_ready; then
        [ -s "$KAFKA_DIR/stdout.log" ] && { log "--- tail of $KAFKA_DIR/stdout.log:"; tail -n 20 "$KAFKA_DIR/stdout.log" >&2; }
        die "kafka: did not start"
    fi
    echo "kafka: running (pid $(cat "$(pidfile kafka)")) on localhost:$KAFKA_PORT"
}

# ---------------------------------------------------------------- hdfs

hdfs_classpath() {
    # The extracted webapps come first: Jetty then serves them from disk
    # instead of unpacking them from the 100 MB minicluster jar (10+ s).
    echo "$HDFS_DIR/classes:$HDFS_DIR/webapps-root:$(cat "$HDFS_DIR/classpath")"
}

# Compiles SluiceMiniDfs.java and extracts the web apps, when out of date.
hdfs_build() {
    local java_src="$SRC/hdfs/SluiceMiniDfs.java" stamp
    stamp="$(sha_of "$java_src" "$HDFS_DIR/classpath")"
    if [ "$(cat "$HDFS_DIR/classes.stamp" 2>/dev/null)" = "$stamp" ] && [ -f "$HDFS_DIR/classes/SluiceMiniDfs.class" ]; then
        return 0
    fi
    rm -rf "$HDFS_DIR/classes" "$HDFS_DIR/webapps-root"
    mkdir -p "$HDFS_DIR/classes" "$HDFS_DIR/webapps-root"
    javac -nowarn -d "$HDFS_DIR/classes" -cp "$(cat "$HDFS_DIR/classpath")" "$java_src" >"$HDFS_DIR/javac.log" 2>&1 \
        || { cat "$HDFS_DIR/javac.log" >&2; die "hdfs: compiling $java_src failed"; }
    local jar
    jar="$(tr ':' '\n' <"$HDFS_DIR/classpath" | grep '/hadoop-client-minicluster-[^/]*\.jar$' | head -1)"
    [ -n "$jar" ] || die "hdfs: hadoop-client-minicluster jar missing from the resolved classpath"
    (cd "$HDFS_DIR/webapps-root" && jar xf "$jar" webapps) || die "hdfs: extracting webapps from $jar failed"
    printf '%s\n' "$stamp" >"$HDFS_DIR/classes.stamp"
}

hdfs_write_client_config() {
    mkdir -p "$HDFS_DIR/conf"
    cat >"$HDFS_DIR/conf/core-site.xml" <<EOF
<?xml version="1.0"?>
<!-- Written by scripts/services.sh: client settings for the test HDFS. -->
<configuration>
  <property><name>fs.defaultFS</name><value>hdfs://localhost:$HDFS_PORT</value></property>
</configuration>
EOF
    cat >"$HDFS_DIR/conf/hdfs-site.xml" <<EOF
<?xml version="1.0"?>
<!-- Written by scripts/services.sh: client settings for the test HDFS. -->
<configuration>
  <property><name>dfs.replication</name><value>1</value></property>
</configuration>
EOF
}

hdfs_ready() { [ -f "$HDFS_DIR/ready" ] && port_open "$HDFS_PORT"; }

start_hdfs() {
    local pid
    pid="$(running_pid hdfs)"
    if [ -n "$pid" ]; then
        echo "hdfs: already running (pid $pid) on hdfs://localhost:$HDFS_PORT"
        return 0
    fi
    if port_open "$HDFS_PORT" || port_open "$HDFS_HTTP_PORT"; then
        die "hdfs: port $HDFS_PORT or $HDFS_HTTP_PORT is already in use by a process this script did not start"
    fi
    resolve hdfs hadoop.version "${SLUICE_HADOOP_VERSION:-}"
    hdfs_build
    hdfs_write_client_config
    mkdir -p "$HDFS_DIR/dfs"
    # Jetty's scratch dirs from an earlier run.
    rm -rf "$HDFS_DIR/tmp"
    mkdir -p "$HDFS_DIR/tmp"
    rm -f "$HDFS_DIR/ready"
    [ -f "$HDFS_DIR/hdfs.log" ] && mv -f "$HDFS_DIR/hdfs.log" "$HDFS_DIR/hdfs.log.1"
    : >"$HDFS_DIR/hdfs.log"
    # C1 only and the serial collector: starts in 2/3 of the time, and a
    # test cluster's throughput does not need C2.
    launch hdfs "$HDFS_DIR/hdfs.log" java -Xmx"${SLUICE_HDFS_HEAP:-1g}" -XX:TieredStopAtLevel=1 -XX:+UseSerialGC \
        -Djava.awt.headless=true -Djava.io.tmpdir="$HDFS_DIR/tmp" \
        -Dsluice.hdfs.port="$HDFS_PORT" -Dsluice.hdfs.http.port="$HDFS_HTTP_PORT" \
        -Dsluice.hdfs.datanodes="${SLUICE_HDFS_DATANODES:-2}" \
        -Dsluice.hdfs.webhdfs="$([ "${SLUICE_HDFS_WEBHDFS:-0}" = 1 ] && echo true || echo false)" \
        -Dorg.slf4j.simpleLogger.showDateTime=true \
        -Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd\'T\'HH:mm:ss.SSS \
        -Dorg.slf4j.simpleLogger.log.org.apache.hadoop.hdfs.server.namenode.FSNamesystem.audit=warn \
        -cp "$(hdfs_classpath)" SluiceMiniDfs "$HDFS_DIR/dfs" "$HDFS_DIR/ready"
    log "hdfs: started (pid $(cat "$(pidfile hdfs)")), waiting for hdfs://localhost:$HDFS_PORT"
    wait_ready hdfs "$HDFS_DIR/hdfs.log" hdfs_ready || die "hdfs: did not start"
    echo "hdfs: running (pid $(cat "$(pidfile hdfs)")) on hdfs://localhost:$HDFS_PORT ($(cut -d'(' -f2 "$HDFS_DIR/ready")"
}

# ---------------------------------------------------------------- commands

services_of() {
    case "${1:-all}" in
        all) echo "kafka hdfs" ;;
        kafka | hdfs) echo "$1" ;;
        *) log "unknown service: $1 (kafka, hdfs or all)"; usage ;;
    esac
}

cmd_start() {
    local services
    services="$(services_of "${1:-all}")"
    mkdir -p "$DIR"
    ensure_tools
    if [ "$services" = "kafka hdfs" ]; then
        # In parallel; each reports its own failure.
        local kpid hpid kst=0 hst=0
        start_kafka &
        kpid=$!
        start_hdfs &
        hpid=$!
        wait "$kpid" || kst=$?
        wait "$hpid" || hst=$?
        if [ "$kst" -ne 0 ] || [ "$hst" -ne 0 ]; then
            die "start failed:$([ "$kst" -ne 0 ] && echo " kafka")$([ "$hst" -ne 0 ] && echo " hdfs")"
        fi
    else
        "start_$services"
    fi
}

cmd_stop() {
    local s
    for s in $(services_of "${1:-all}"); do stop_service "$s"; done
}

cmd_status() {
    local s pid
    for s in $(services_of "${1:-all}"); do
        pid="$(running_pid "$s")"
        if [ -n "$pid" ]; then
            echo "$s: running (pid $pid)"
        else
            echo "$s: stopped"
        fi
    done
}

cmd_env() {
    cat <<EOF
export SLUICE_SERVICES_DIR='$DIR'
export SLUICE_KAFKA_BOOTSTRAP='localhost:$KAFKA_PORT'
export SLUICE_HDFS_URL='hdfs://localhost:$HDFS_PORT'
EOF
    if [ "${SLUICE_HDFS_WEBHDFS:-0}" = 1 ]; then
        echo "export SLUICE_WEBHDFS_URL='http://127.0.0.1:$HDFS_HTTP_PORT'"
    fi
}

cmd="${1:-}"
[ $# -gt 0 ] && shift
case "$cmd" in
    start) cmd_start "${1:-all}" ;;
    stop) cmd_stop "${1:-all}" ;;
    restart) cmd_stop "${1:-all}"; cmd_start "${1:-all}" ;;
    status) cmd_status "${1:-all}" ;;
    env) cmd_env ;;
    logs)
        case "${1:-}" in
            kafka) echo "$KAFKA_DIR/logs/server.log" ;;
            hdfs) echo "$HDFS_DIR/hdfs.log" ;;
            *) usage ;;
        esac
        ;;
    kafka-topics)
        ensure_tools
        resolve kafka kafka.version "${SLUICE_KAFKA_VERSION:-}"
        if [[ " $* " == *" --bootstrap-server "* ]]; then
            kafka_java org.apache.kafka.tools.TopicCommand "$@"
        else
            kafka_java org.apache.kafka.tools.TopicCommand --bootstrap-server "localhost:$KAFKA_PORT" "$@"
        fi
        ;;
    kafka-run)
        [ $# -ge 1 ] || usage
        ensure_tools
        resolve kafka kafka.version "${SLUICE_KAFKA_VERSION:-}"
        kafka_java "$@"
        ;;
    hdfs-dfs)
        ensure_tools
        resolve hdfs hadoop.version "${SLUICE_HADOOP_VERSION:-}"
        hdfs_write_client_config
        java -Xmx256m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Dorg.slf4j.simpleLogger.defaultLogLevel=error \
            -cp "$HDFS_DIR/conf:$(cat "$HDFS_DIR/classpath")" org.apache.hadoop.fs.FsShell "$@"
        ;;
    -h | --help | help) usage ;;
    *) usage ;;
esac
