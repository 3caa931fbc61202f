"""fabnb's default Haystack pipeline, served by hayhooks at POST /fabnb_haystack/run.

    FABNB_SERVE_CORPUS=corpus/ FABNB_SERVE_BASE_URL=http://127.0.0.1:8080/v1 FABNB_SERVE_MODEL=my-model \
        hayhooks run --host 127.0.0.1 --port 1416 --pipelines-dir examples/hayhooks

then a ``kind = "hayhooks"`` system with ``settings = {pipeline = "fabnb_haystack"}`` (docs/frameworks.md).
The variables are listed in ``fabnb.rag.SERVE_ENV``. To serve your own pipeline, copy this folder and give
``FABNB_SERVE_FACTORY``, or write ``run_api`` yourself returning ``{"answer", "documents"}``.
"""

from hayhooks import BasePipelineWrapper

from fabnb.rag import ServedPipeline


class PipelineWrapper(BasePipelineWrapper):
    def setup(self) -> None:
        self.served = ServedPipeline.from_env()

    def run_api(self, question: str, context_tokens: int = 2048, max_tokens: int = 512) -> dict:
        """Answer a question from the corpus: the answer, the documents sent to the model and their tokens."""
        return self.served.run(question, context_tokens, max_tokens)
