#!/usr/bin/env bash
# Prepares .carry/ (git-ignored) for scripts/gpu/session.sh on the GPU machine: the Debian
# packages it lacks (cJSON, PCRE2 headers, zlib headers) and a copy of ../shared/{data,bench}.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .carry/debs .carry/shared
( cd .carry/debs && [ -n "$(ls ./*.deb 2>/dev/null)" ] || apt-get download libcjson1 libcjson-dev libpcre2-dev \
    libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 zlib1g-dev )
rm -rf .carry/shared && mkdir -p .carry/shared && cp -r ../shared/data ../shared/bench .carry/shared/
du -sh .carry
