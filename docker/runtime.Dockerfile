# Runtime image: the base plus everything but the project code (Python deps, Java home, user,
# environment, entrypoint). Built by scripts/build_images.sh with build/wheels/ as its context
# and the legacy builder, with no network inside any step; docker/Dockerfile adds the code.
ARG BASE_IMAGE=flights-optimizer-base:bookworm

# Throwaway stage: the wheels are copied in here and never reach the runtime image (the legacy
# builder has no RUN --mount), only the venv they install does.
FROM ${BASE_IMAGE} AS venv
COPY . /tmp/wheels/
RUN python3 -m venv /opt/venv \
 && /opt/venv/bin/pip install --no-index --no-cache-dir --disable-pip-version-check \
        --find-links /tmp/wheels --requirement /tmp/wheels/requirements.txt

FROM ${BASE_IMAGE}
# JAVA_HOME through an arch-independent link; an unprivileged user for every service, and
# /var/lib/flights owned by it: compose mounts each service's named volume there, and Docker
# gives a new volume the ownership of the image's directory it is mounted on. Services
# that talk to the Docker socket (health checkers) need `user: root` or a `group_add` of the
# socket's group in compose: that group id is only known on the host.
RUN ln -s "$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")" /opt/java \
 && groupadd --gid 10001 flights \
 && useradd --uid 10001 --gid flights --create-home --shell /bin/bash flights \
 && install -d -o flights -g flights /app /var/lib/flights
COPY --from=venv /opt/venv /opt/venv
ENV JAVA_HOME=/opt/java \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYSPARK_PYTHON=/opt/venv/bin/python \
    PYSPARK_DRIVER_PYTHON=/opt/venv/bin/python \
    PYTHONPATH=/app \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /app
USER flights
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["python", "-c", "import common; print('flights-optimizer image: pass a service command')"]
