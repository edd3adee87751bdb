# Base image when the upstream Python image CAN be pulled (a registry answers): adds what the
# locally debootstrapped base has too. Used by scripts/build_base_image.sh only; the apt step
# below is the one build step that uses the network, and it only runs where a registry does.
ARG UPSTREAM_IMAGE=python:3.11-slim-bookworm
FROM ${UPSTREAM_IMAGE}
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        openjdk-17-jre-headless tini procps ca-certificates prometheus kcat \
 && rm -rf /var/lib/apt/lists/*
