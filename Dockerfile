# Image for the provider, the worker and the one-shot setup job of docker-compose.yml.
FROM node:20-bookworm-slim
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev && npm cache clean --force
COPY . .
# The command line's build (bin/client), made here while node_modules is writable.
RUN node bin/client --help >/dev/null
USER node
