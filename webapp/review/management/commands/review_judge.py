"""Ask the LLM judge (REVIEW_JUDGE_BASE_URL / REVIEW_JUDGE_MODEL) about kernels; hacks become flags."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from webapp.review.services import llm_judge_kernel


class Command(BaseCommand):
    help = "Judge kernels with the configured OpenAI-compatible LLM; a 'hack' verdict flags the kernel."

    def add_arguments(self, parser):
        parser.add_argument("kernel_ids", nargs="+", type=int)

    def handle(self, *args, kernel_ids: list[int], **options):
        from webapp.review.judge import default_client

        client = default_client()
        for kernel_id in kernel_ids:
            verdict = llm_judge_kernel(kernel_id=kernel_id, client=client)
            flagged = f" -> flag {verdict.flag_id}" if verdict.flag_id else ""
            self.stdout.write(
                f"kernel {kernel_id}: {verdict.verdict} (family {verdict.family}){flagged}: {verdict.reason}"
            )
