# One image for the API, the worker and the migration job (see docker-compose.yml).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    SUFFICIENCY_MIGRATIONS_DIR=/app/migrations \
    SUFFICIENCY_DATA_DIR=/app/data

WORKDIR /app
COPY pyproject.toml README.md alembic.ini ./
COPY service ./service
COPY workers ./workers
COPY migrations ./migrations
# the imports compile the lattice kernels, the confidence sequence's and the orders' into numba's cache
# beside them (read by every process)
RUN pip install . \
 && (cd / && python -c "import service.engine.lattice_kernel, service.engine.betting_kernel, service.engine.orders_kernel") \
 && useradd --create-home --uid 1000 app \
 && mkdir -p /app/data \
 && chown -R app /app/data

USER app
EXPOSE 8000
CMD ["sufficiency", "serve", "--host", "0.0.0.0", "--port", "8000"]
