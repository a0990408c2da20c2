# syntax=docker/dockerfile:1
#
# weft in a container: a static binary on a small Alpine image (it has the
# /bin/sh that exec steps usually need, and CA certificates for http steps).
#
#   docker build -t weft .
#   docker run --rm weft version
#
# SQLite is compiled in through cgo (mattn/go-sqlite3, see
# docs/sqlite-driver.md), so the build stage uses the Debian Go image with
# gcc and links the binary statically; PostgreSQL needs nothing more.

ARG GO_VERSION=1.26
ARG ALPINE_VERSION=3.21

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
# Dependencies first, so that they stay cached while the source changes.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
# -buildvcs=auto stamps the commit `weft version` prints when the build
# context holds the .git directory (a plain checkout; see .dockerignore).
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=1 go build -trimpath -buildvcs=auto \
      -tags 'osusergo,netgo,sqlite_omit_load_extension' \
      -ldflags '-s -w -linkmode external -extldflags "-static"' \
      -o /out/weft ./cmd/weft \
 && /out/weft version

FROM alpine:${ALPINE_VERSION}
RUN apk add --no-cache ca-certificates tzdata \
 && adduser -D -H -u 10001 weft \
 && mkdir -p /data && chown weft /data
COPY --from=build /out/weft /usr/local/bin/weft
USER weft
WORKDIR /data
# A SQLite database in the /data volume unless WEFT_DB names another.
ENV WEFT_DB=/data/weft.db
VOLUME /data
EXPOSE 8080
ENTRYPOINT ["weft"]
CMD ["serve", "--addr", "0.0.0.0:8080"]
