"""How a kafleet client authenticates and encrypts: the ``security`` part of the configuration.

Owns: the SASL and SSL settings, their consistency (a SASL protocol needs a mechanism; PLAIN and
SCRAM need a username and password), and rendering them as librdkafka properties. Secrets are
``SecretStr``: masked in every print, ``repr`` and dump, and read only when rendered for the
client. Does not own the rest of the configuration (``config/model.py``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator


class Security(BaseModel):
    """How the client authenticates and encrypts; secrets are masked when printed."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        "PLAINTEXT", description="librdkafka's security.protocol"
    )
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"] | None = (
        Field(None, description="librdkafka's sasl.mechanism; required with a SASL protocol")
    )
    sasl_username: str | None = Field(
        None, description="librdkafka's sasl.username; required with PLAIN and SCRAM"
    )
    sasl_password: SecretStr | None = Field(
        None, description="secret: set it as KAFLEET_SECURITY__SASL_PASSWORD; masked when printed"
    )
    ssl_ca_location: str | None = Field(
        None,
        description="librdkafka's ssl.ca.location: the CA that signed the brokers' certificates",
    )
    ssl_certificate_location: str | None = Field(
        None, description="librdkafka's ssl.certificate.location: the client's certificate (mTLS)"
    )
    ssl_key_location: str | None = Field(
        None, description="librdkafka's ssl.key.location: the client's private key (mTLS)"
    )
    ssl_key_password: SecretStr | None = Field(
        None, description="secret: KAFLEET_SECURITY__SSL_KEY_PASSWORD; masked when printed"
    )

    @model_validator(mode="after")
    def _sasl_complete(self) -> Security:
        if self.protocol.startswith("SASL") and self.sasl_mechanism is None:
            raise ValueError(f"sasl_mechanism is required with protocol {self.protocol}")
        if self.sasl_mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512") and not (
            self.sasl_username and self.sasl_password
        ):
            raise ValueError(
                f"sasl_username and sasl_password are required with {self.sasl_mechanism}"
            )
        return self

    def properties(self) -> dict[str, str]:
        props: dict[str, str] = {"security.protocol": self.protocol}
        plain = {
            "sasl.mechanism": self.sasl_mechanism,
            "sasl.username": self.sasl_username,
            "ssl.ca.location": self.ssl_ca_location,
            "ssl.certificate.location": self.ssl_certificate_location,
            "ssl.key.location": self.ssl_key_location,
        }
        props.update({k: v for k, v in plain.items() if v is not None})
        if self.sasl_password is not None:
            props["sasl.password"] = self.sasl_password.get_secret_value()
        if self.ssl_key_password is not None:
            props["ssl.key.password"] = self.ssl_key_password.get_secret_value()
        return props
