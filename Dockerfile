# kafleet's container images, built by `make image` (docker, podman or buildah) and, for the real
# node of the test bed, by tests/infra/images.py (buildah, from a Debian base of its own).
#
#   (default: the last stage) kafleet   the worker, the sidecar and the operator ('.[operator]')
#   --target spark                      the same plus a headless JRE 17, the '[spark]' extra and
#                                       Delta Lake's jars inside pyspark's own jars folder
#
# The runtime contract of both images:
#   * uid/gid 65532, numeric, so `runAsNonRoot: true` can check it without a passwd lookup; every
#     file is root's, readable by all and writable by none but root;
#   * works with `readOnlyRootFilesystem: true` as long as /tmp is writable (the operator mounts an
#     emptyDir there): HOME and the working directory are /tmp, so what Python, Java, Spark and
#     Ivy write relative to them (caches, spark-warehouse, derby.log) lands in the one writable
#     place; byte code is compiled when the image is built, never written at run time;
#   * `ENTRYPOINT ["kafleet"]`, so `args: [worker, ...]` works, and `command: [kafleet]` with the
#     same args works too.
#
# Layers, from the most to the least stable: the dependencies' wheels are resolved from
# pyproject.toml alone, so a change to kafleet's code rebuilds only kafleet's own small wheel and
# the last layer of each image, never pyspark. The wheels reach the runtime stages through
# `RUN --mount=type=bind,from=...`, so no layer holds them (needs BuildKit, podman or buildah).
# Each such RUN follows a COPY of the wheels' SHA256SUMS: the file records what went into the
# image, and since COPY is keyed by content it also keys the RUN after it (buildah's layer cache
# does not look into a stage mounted with --mount=from=, containers/buildah#6609).

# Debian bookworm, not trixie: the spark target needs openjdk-17-jre-headless, which trixie no
# longer has (Spark 4 runs on Java 17 or 21; trixie ships 21 and newer). The test bed passes
# localhost/bookworm-python:12 (Debian's own python3 3.11); only `python3` is assumed.
ARG BASE_IMAGE=python:3.11-slim-bookworm


# ---- build-tools: a pinned pip in a venv, and pip's own wheel ----------------------------------
FROM ${BASE_IMAGE} AS build-tools
ARG PIP_VERSION=26.3
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    PYTHONDONTWRITEBYTECODE=1
# A venv: Debian's python3 is "externally managed" (PEP 668) and may come without pip.
RUN python3 -m venv /opt/build \
 && /opt/build/bin/pip install "pip==${PIP_VERSION}" \
 && /opt/build/bin/pip wheel --no-deps --wheel-dir /tools "pip==${PIP_VERSION}"
WORKDIR /src


# ---- deps / deps-spark: wheels of all dependencies, resolved from pyproject.toml alone ---------
FROM build-tools AS deps
ARG EXTRAS=operator
COPY pyproject.toml ./
RUN set -eu; mkdir /wheels; \
    python3 -c 'import sys, tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; \
print(*p["dependencies"], *(d for e in sys.argv[1:] for d in p["optional-dependencies"][e]), sep="\n")' \
      $(echo "${EXTRAS}" | tr , ' ') > /wheels/requirements.txt; \
    /opt/build/bin/pip wheel --wheel-dir /wheels -r /wheels/requirements.txt; \
    cd /wheels; sha256sum *.whl > SHA256SUMS

# A stage of its own, so the default image never downloads pyspark.
FROM deps AS deps-spark
RUN set -eu; cd /wheels; \
    python3 -c 'import tomllib; e = tomllib.load(open("/src/pyproject.toml", "rb"))["project"]["optional-dependencies"]; print(*e["spark"], *e["share"], sep="\n")' \
      > requirements-spark.txt; \
    /opt/build/bin/pip wheel --wheel-dir /wheels --find-links /wheels \
      -r requirements.txt -r requirements-spark.txt; \
    sha256sum *.whl > SHA256SUMS


# ---- build: kafleet's own wheel ----------------------------------------------------------------
FROM build-tools AS build
COPY pyproject.toml README.md LICENSE ./
COPY consumer ./consumer
COPY operator ./operator
RUN /opt/build/bin/pip wheel --no-deps --wheel-dir /dist . \
 && cd /dist && sha256sum *.whl > SHA256SUMS


# ---- delta-jars: Delta Lake's two jars from Maven Central, checked against pinned digests -------
# Only these two: their transitive dependencies (Scala, Jackson, Hadoop) are pyspark's own.
# python3's urllib rather than curl, which the base may lack; it honours SSL_CERT_FILE.
FROM ${BASE_IMAGE} AS delta-jars
ARG DELTA_VERSION=4.4.0
ARG DELTA_SPARK_ARTIFACT=delta-spark_4.2_2.13
ARG DELTA_SPARK_SHA256=27d4fd8b1f879535c573ed1c718177d6a27f24d3e626ba02e216369725721ead
ARG DELTA_STORAGE_SHA256=c46735481fa8e326b0957be02b4420cbcab4b325bb08009b7f2045a95133f1cc
ARG MAVEN=https://repo1.maven.org/maven2
WORKDIR /jars
RUN set -eu; \
    fetch() { python3 -c 'import sys, urllib.request; urllib.request.urlretrieve(*sys.argv[1:])' \
      "${MAVEN}/io/delta/$1/${DELTA_VERSION}/$1-${DELTA_VERSION}.jar" "$1-${DELTA_VERSION}.jar"; }; \
    fetch "${DELTA_SPARK_ARTIFACT}"; \
    fetch delta-storage; \
    printf '%s  %s\n' \
      "${DELTA_SPARK_SHA256}" "${DELTA_SPARK_ARTIFACT}-${DELTA_VERSION}.jar" \
      "${DELTA_STORAGE_SHA256}" "delta-storage-${DELTA_VERSION}.jar" > SHA256SUMS; \
    sha256sum -c SHA256SUMS


# ---- runtime: a clean base, the user, and a venv with the dependencies of '.[operator]' --------
# Kafka's Java client for share groups (group_type: share): KIP-1206's record limit needs
# ShareFetch v2, which only the Java client speaks. The jars `kafleet share-jars` fetches.
FROM ${BASE_IMAGE} AS share-jars
ARG MAVEN=https://repo1.maven.org/maven2
WORKDIR /jars
RUN set -eu; \
    fetch() { python3 -c 'import sys, urllib.request; urllib.request.urlretrieve(*sys.argv[1:])' \
      "${MAVEN}/$1/$2/$3/$2-$3.jar" "$2-$3.jar"; }; \
    fetch org/apache/kafka kafka-clients 4.3.1; \
    fetch com/github/luben zstd-jni 1.5.6-10; \
    fetch at/yawk/lz4 lz4-java 1.10.2; \
    fetch org/xerial/snappy snappy-java 1.1.10.7; \
    fetch org/slf4j slf4j-api 1.7.36; \
    fetch org/slf4j slf4j-simple 1.7.36; \
    printf '%s  %s\n' \
      52501b7b47510c66f898871adaf6d2968ab7246561d44ced43643a8a587f0b36 kafka-clients-4.3.1.jar \
      b6c3237e24b8252a5a9c3a0e1ae30ef8f323412e74bd358548b7a9e527d676df zstd-jni-1.5.6-10.jar \
      252dabd586d22149a31661a8afc1a50747714eb1a298bd4a6e780c8c91a13866 lz4-java-1.10.2.jar \
      4c766cb3f855415ee734b2392949a0b6f12a60879334a74518deaf6270d32e36 snappy-java-1.1.10.7.jar \
      d3ef575e3e4979678dc01bf1dcce51021493b4d11fb7f1be8ad982877c16a1c0 slf4j-api-1.7.36.jar \
      2f39bed943d624dfa8f4102d0571283a10870b6aa36f197a8a506f147010c10f slf4j-simple-1.7.36.jar \
      > SHA256SUMS; \
    sha256sum -c SHA256SUMS

FROM ${BASE_IMAGE} AS runtime
# PATH in full, not ${PATH}: a base made with `buildah from scratch` may have none.
ENV PATH=/opt/kafleet/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    LANG=C.UTF-8 \
    HOME=/tmp
# A passwd entry for 65532: Java and Hadoop look the user's name and home up (an unknown uid
# makes Hadoop's login fail). Written directly: the base may have no useradd.
RUN echo 'kafleet:x:65532:65532:kafleet:/tmp:/usr/sbin/nologin' >> /etc/passwd \
 && echo 'kafleet:x:65532:' >> /etc/group
# The venv gets no pip: pip runs from its wheel, so nothing of the build stays in the image.
# Byte code is compiled now (pip's default), as root: the files are root's, readable by all.
COPY --from=deps /wheels/SHA256SUMS /opt/kafleet/wheels.sha256
RUN --mount=type=bind,from=build-tools,source=/tools,target=/tools \
    --mount=type=bind,from=deps,source=/wheels,target=/wheels \
    set -eu; set -- /tools/pip-*.whl; \
    python3 -m venv --without-pip /opt/kafleet; \
    PIP_ROOT_USER_ACTION=ignore /opt/kafleet/bin/python "$1/pip" install --no-cache-dir \
      --disable-pip-version-check --no-index --find-links /wheels -r /wheels/requirements.txt
WORKDIR /tmp
USER 65532:65532
ENTRYPOINT ["kafleet"]
CMD ["--help"]


# ---- spark: the runtime plus a JRE 17, the [spark] extra and Delta Lake's jars, and the share
# extra with Kafka's Java client (share groups) ---------------------------------------------------
FROM runtime AS spark
USER 0:0
# Slim bases drop man pages, and the JRE's postinst fails without the man1 folder. What apt and
# the JRE's postinst (which runs java) leave behind is removed in the same layer.
RUN set -eu; mkdir -p /usr/share/man/man1; \
    apt-get update; \
    apt-get install -y --no-install-recommends openjdk-17-jre-headless; \
    apt-get clean; \
    rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/cache/debconf/*-old /var/log/apt \
      /var/log/dpkg.log /var/log/alternatives.log /tmp/hsperfdata_root; \
    ln -s "java-17-openjdk-$(dpkg --print-architecture)" /usr/lib/jvm/java-17
ENV JAVA_HOME=/usr/lib/jvm/java-17 \
    KAFLEET_SHARE__CLASSPATH=/opt/kafleet/share-client/*
COPY --from=share-jars /jars/ /opt/kafleet/share-client/
# Delta's jars go into pyspark/jars, Spark's own class path: every in-process session has Delta
# with no spark.jars setting (the session still names Delta's SQL extension and catalog).
COPY --from=deps-spark /wheels/SHA256SUMS /opt/kafleet/wheels-spark.sha256
COPY --from=delta-jars /jars/SHA256SUMS /opt/kafleet/delta-jars.sha256
RUN --mount=type=bind,from=build-tools,source=/tools,target=/tools \
    --mount=type=bind,from=deps-spark,source=/wheels,target=/wheels \
    --mount=type=bind,from=delta-jars,source=/jars,target=/delta-jars \
    set -eu; set -- /tools/pip-*.whl; \
    PIP_ROOT_USER_ACTION=ignore /opt/kafleet/bin/python "$1/pip" install --no-cache-dir \
      --disable-pip-version-check --no-index --find-links /wheels \
      -r /wheels/requirements.txt -r /wheels/requirements-spark.txt; \
    jars="$(python3 -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')/jars"; \
    cp /delta-jars/*.jar "$jars/"; \
    chmod 0644 "$jars"/delta-*.jar
COPY --from=build /dist/SHA256SUMS /opt/kafleet/kafleet.sha256
# The build's identity, for the labels, declared before the last RUN: buildah's and podman's
# layer cache key a RUN by the ARG values it sees but a LABEL by its text alone, so a new
# revision or date rebuilds this small layer and the labels below are never stale.
ARG VERSION=0.0.0-dev
ARG REVISION=unknown
ARG CREATED=unknown
ARG SOURCE=
RUN --mount=type=bind,from=build-tools,source=/tools,target=/tools \
    --mount=type=bind,from=deps-spark,source=/wheels,target=/wheels \
    --mount=type=bind,from=build,source=/dist,target=/dist \
    set -eu; set -- /tools/pip-*.whl; \
    PIP_ROOT_USER_ACTION=ignore /opt/kafleet/bin/python "$1/pip" install --no-cache-dir \
      --disable-pip-version-check --no-index --find-links /dist --find-links /wheels \
      'kafleet[operator,spark,share]'
USER 65532:65532
LABEL org.opencontainers.image.title="kafleet-spark" \
      org.opencontainers.image.description="kafleet with Spark and share groups: the worker, the sidecar and the operator, plus pyspark, Delta Lake, Kafka's Java client and a headless JRE 17" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}"


# ---- kafleet (the default): the runtime plus kafleet's own wheel -------------------------------
FROM runtime AS kafleet
USER 0:0
COPY --from=build /dist/SHA256SUMS /opt/kafleet/kafleet.sha256
# The build's identity, for the labels, before the last RUN (why: see the spark stage).
ARG VERSION=0.0.0-dev
ARG REVISION=unknown
ARG CREATED=unknown
ARG SOURCE=
RUN --mount=type=bind,from=build-tools,source=/tools,target=/tools \
    --mount=type=bind,from=deps,source=/wheels,target=/wheels \
    --mount=type=bind,from=build,source=/dist,target=/dist \
    set -eu; set -- /tools/pip-*.whl; \
    PIP_ROOT_USER_ACTION=ignore /opt/kafleet/bin/python "$1/pip" install --no-cache-dir \
      --disable-pip-version-check --no-index --find-links /dist --find-links /wheels \
      'kafleet[operator]'
USER 65532:65532
LABEL org.opencontainers.image.title="kafleet" \
      org.opencontainers.image.description="kafleet: a parallel, back-pressured Kafka consumer for slow work (worker and sidecar), and the operator that runs it as a self-scaling fleet" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}"
