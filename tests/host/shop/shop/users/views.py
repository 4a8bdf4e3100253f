from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView


class MeSerializer(serializers.Serializer):  # type: ignore[type-arg]
    email = serializers.EmailField()
    name = serializers.CharField()


class MeView(APIView):
    """The signed-in user: one of the shop's own DRF endpoints, in its schema beside Helix."""

    @extend_schema(responses=MeSerializer)
    def get(self, request: Request) -> Response:
        return Response(MeSerializer(request.user).data)
