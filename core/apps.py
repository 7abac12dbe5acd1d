from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "core"

    def ready(self):
        # Django reads at most 1 KB of headers per multipart part: a file name of ~900+ bytes
        # made an attachment upload fail. Names are shortened when stored
        # (chats.attachments.attachment_name), so accept them long here; the body stays capped.
        from django.http import multipartparser

        multipartparser.MAX_TOTAL_HEADER_SIZE = 64 * 1024
