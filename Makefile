# The usual jobs. `make help` lists them.
PYTHON ?= python3

.PHONY: help install install-gpu test test-gpu lint format book book-results tile-eval exercises sanitize bench train clean

help:
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

install: ## install the package with the dev and book extras (no GPU needed)
	$(PYTHON) -m pip install -e '.[dev,book]'

install-gpu: ## the same plus PyCUDA (needs the CUDA toolkit and driver)
	$(PYTHON) -m pip install -e '.[cuda,dev,book]'

test: ## the whole suite; GPU tests run where a GPU is present and skip with a reason elsewhere
	$(PYTHON) -m pytest -q

test-gpu: ## only the GPU tests
	$(PYTHON) -m pytest -q -m gpu

lint: ## ruff, as CI runs it
	ruff check .

format: ## format the Python sources (the files ruff check reads; pyproject.toml keeps Markdown out)
	ruff format .
	ruff check --fix .

book: ## regenerate the .ipynb copies, then build the HTML book, warnings as errors
	$(PYTHON) -m minitorch_cuda.book.notebooks
	.ci/build_book.sh

book-results: ## on a GPU machine: re-make every record the book reads into book/results/ (book/results/README.md)
	bash .ci/refresh_results.sh

tile-eval: ## on a GPU machine: chapter 20's tile evaluation (several minutes) into book/results/tile_eval.json
	$(PYTHON) -m minitorch_cuda.tile_eval --record

exercises: ## regenerate exercises/ from solutions/, and the .ipynb copies in book/notebooks/ (Colab, downloads)
	$(PYTHON) -m minitorch_cuda.grade.generate
	$(PYTHON) -m minitorch_cuda.book.notebooks

sanitize: ## compute-sanitizer (memcheck, racecheck, synccheck) over every kernel at every stage
	$(PYTHON) -m minitorch_cuda.sanitize

bench: ## the blog's benchmark for stages 0-8 with PyTorch eager alongside
	$(PYTHON) -m minitorch_cuda.bench

train: ## a short MNIST training on whatever device there is
	$(PYTHON) -m minitorch_cuda train

clean:
	rm -rf _build .pytest_cache .ruff_cache .hypothesis
