from django.urls import path

from runner import views

urlpatterns = [
    path("runs/<str:run_id>/", views.run_fragment, name="run_fragment"),
    path("runs/<str:run_id>/output", views.run_output, name="run_output"),
]
