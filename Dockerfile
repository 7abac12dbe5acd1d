# Malamar's image for the scaled-out shape (compose.yaml, docs/scale-out.md): Python, git and
# Malamar. It holds no agent CLI: build your worker image FROM this one with the CLIs you use.
FROM python:3.11-slim

RUN apt-get update \
    && apt-get install --yes --no-install-recommends git \
    && rm -rf /var/lib/apt/lists/*

# A fixed unprivileged user; its folders exist in the image so that new volumes mounted there
# are owned by it: the per-container data dir, the shared storage and the CLIs' home.
RUN useradd --create-home --uid 10001 --shell /bin/sh malamar \
    && mkdir -p /var/lib/malamar /srv/malamar /projects \
    && chown malamar:malamar /var/lib/malamar /srv/malamar /projects

WORKDIR /app
COPY . /app
RUN pip install --no-cache-dir /app \
    && install -m 0755 /app/deploy/entrypoint.sh /usr/local/bin/malamar-entrypoint

USER malamar
ENV MALAMAR_DATA_DIR=/var/lib/malamar \
    MALAMAR_TEMP_DIR=/srv/malamar/tmp \
    SHARED_DIR=/srv/malamar \
    PYTHONUNBUFFERED=1
EXPOSE 3456
ENTRYPOINT ["malamar-entrypoint"]
CMD ["malamar", "doctor"]
