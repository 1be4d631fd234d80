# The cronlock image: the static binary and CA certificates, nothing else (no shell, no
# package manager). Built by `make image`, which cross-compiles the binary on the host and puts
# it and the host's CA bundle in build/image/: nothing is pulled from a registry.
#
# Jobs' commands run inside the container, so add the tools they need in a derived image
# (FROM cronlock:dev, COPY your tools), or copy the binary into your own image instead:
#   COPY --from=cronlock:dev /usr/local/bin/cronlock /usr/local/bin/cronlock
# docs/deploy.md has both.
FROM scratch

ARG VERSION=devel
ARG COMMIT=unknown
ARG CREATED=unknown

LABEL org.opencontainers.image.title="cronlock" \
      org.opencontainers.image.description="Cluster-singleton cron jobs: each tick runs once across replicas, guarded by a Redlock over independent Redis nodes" \
      org.opencontainers.image.source="https://github.com/cronlock/cronlock" \
      org.opencontainers.image.documentation="https://github.com/cronlock/cronlock/blob/main/docs/deploy.md" \
      org.opencontainers.image.licenses="MIT" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${COMMIT}" \
      org.opencontainers.image.created="${CREATED}"

COPY build/image/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY build/image/cronlock /usr/local/bin/cronlock

# 65532: the conventional "nonroot" id of distroless images; numeric, so that Kubernetes'
# runAsNonRoot can check it without an /etc/passwd.
USER 65532:65532

# cronlock stays PID 1: it runs the daemon as its child, reaps orphans and forwards signals.
ENTRYPOINT ["/usr/local/bin/cronlock"]
CMD ["run", "--config", "/etc/cronlock/cronlock.yaml"]
